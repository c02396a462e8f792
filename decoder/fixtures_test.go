package decoder

import (
	"encoding/binary"
	"time"

	"github.com/jackc/pglogrepl"
)

// Wire fixtures for one small transaction as pgoutput proto_version 1 sends
// it: Begin, Relation, Insert, Commit, plus a logical decoding message. They
// are written byte by byte from the layouts in the PostgreSQL documentation
// ("Logical Replication Message Formats") and src/backend/replication/logical/
// proto.c, and every field is annotated, so a reader can check them against
// the spec without running anything. All integers are big-endian.

const (
	fixXID       = 750
	fixCommitLSN = pglogrepl.LSN(0x016B3748) // 0/16B3748: start of the commit record
	fixEndLSN    = pglogrepl.LSN(0x016B3778) // 0/16B3778: just past it
	fixInsertLSN = pglogrepl.LSN(0x016B3690) // 0/16B3690: WALStart of the Insert's XLogData
	fixMsgLSN    = pglogrepl.LSN(0x016B3700) // 0/16B3700: the logical message record
	fixRelID     = 16385
)

// fixCommitTime is 2024-05-01 12:00:00.123456 UTC, which is
// 767880000123456 µs after the Postgres epoch 2000-01-01.
var fixCommitTime = time.Date(2024, 5, 1, 12, 0, 0, 123456000, time.UTC)

// cat joins annotated byte groups into one message.
func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// fixBegin opens transaction 750.
var fixBegin = cat(
	[]byte{'B'}, // Byte1('B'): Begin
	[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x48}, // Int64: final LSN 0/16B3748
	[]byte{0x00, 0x02, 0xba, 0x61, 0xfe, 0xa3, 0x32, 0x40}, // Int64: commit time 767880000123456 µs
	[]byte{0x00, 0x00, 0x02, 0xee},                         // Int32: xid 750
)

// fixCommit closes transaction 750.
var fixCommit = cat(
	[]byte{'C'},  // Byte1('C'): Commit
	[]byte{0x00}, // Int8: flags, unused (0)
	[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x48}, // Int64: commit LSN 0/16B3748
	[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x78}, // Int64: end LSN 0/16B3778
	[]byte{0x00, 0x02, 0xba, 0x61, 0xfe, 0xa3, 0x32, 0x40}, // Int64: commit time 767880000123456 µs
)

// fixRelation describes public.outbox(id bigint, aggregate_id text,
// payload jsonb, sent_at timestamptz) with the default replica identity
// (the primary key, id).
var fixRelation = cat(
	[]byte{'R'},                    // Byte1('R'): Relation
	[]byte{0x00, 0x00, 0x40, 0x01}, // Int32: relation OID 16385
	[]byte("public\x00"),           // String: namespace
	[]byte("outbox\x00"),           // String: relation name
	[]byte{'d'},                    // Int8: replica identity 'd' (default: primary key)
	[]byte{0x00, 0x04},             // Int16: 4 columns
	// column 0
	[]byte{0x01},                   // Int8: flags, 1 = part of the key
	[]byte("id\x00"),               // String: column name
	[]byte{0x00, 0x00, 0x00, 0x14}, // Int32: type OID 20 (int8)
	[]byte{0xff, 0xff, 0xff, 0xff}, // Int32: type modifier -1
	// column 1
	[]byte{0x00},                   // Int8: flags, not a key
	[]byte("aggregate_id\x00"),     // String: column name
	[]byte{0x00, 0x00, 0x00, 0x19}, // Int32: type OID 25 (text)
	[]byte{0xff, 0xff, 0xff, 0xff}, // Int32: type modifier -1
	// column 2
	[]byte{0x00},                   // Int8: flags
	[]byte("payload\x00"),          // String: column name
	[]byte{0x00, 0x00, 0x0e, 0xda}, // Int32: type OID 3802 (jsonb)
	[]byte{0xff, 0xff, 0xff, 0xff}, // Int32: type modifier -1
	// column 3
	[]byte{0x00},                   // Int8: flags
	[]byte("sent_at\x00"),          // String: column name
	[]byte{0x00, 0x00, 0x04, 0xa0}, // Int32: type OID 1184 (timestamptz)
	[]byte{0xff, 0xff, 0xff, 0xff}, // Int32: type modifier -1
)

// fixRelationWant is what fixRelation decodes to.
func fixRelationWant() *Relation {
	return &Relation{
		ID:        fixRelID,
		Namespace: "public",
		Name:      "outbox",
		Columns: []Column{
			{Name: "id", TypeOID: Int8OID, TypeModifier: -1, Key: true},
			{Name: "aggregate_id", TypeOID: TextOID, TypeModifier: -1},
			{Name: "payload", TypeOID: JSONBOID, TypeModifier: -1},
			{Name: "sent_at", TypeOID: TimestamptzOID, TypeModifier: -1},
		},
	}
}

// fixInsert inserts (42, 'order-7', '{"a": 1}', NULL) into public.outbox.
var fixInsert = cat(
	[]byte{'I'},                    // Byte1('I'): Insert
	[]byte{0x00, 0x00, 0x40, 0x01}, // Int32: relation OID 16385
	[]byte{'N'},                    // Byte1('N'): a new tuple follows
	[]byte{0x00, 0x04},             // Int16: 4 columns
	// column 0: id
	[]byte{'t'},                    // Byte1('t'): text format
	[]byte{0x00, 0x00, 0x00, 0x02}, // Int32: length 2
	[]byte("42"),                   // Byte2: value
	// column 1: aggregate_id
	[]byte{'t'},                    // Byte1('t'): text format
	[]byte{0x00, 0x00, 0x00, 0x07}, // Int32: length 7
	[]byte("order-7"),              // Byte7: value
	// column 2: payload
	[]byte{'t'},                    // Byte1('t'): text format
	[]byte{0x00, 0x00, 0x00, 0x08}, // Int32: length 8
	[]byte(`{"a": 1}`),             // Byte8: value
	// column 3: sent_at
	[]byte{'n'}, // Byte1('n'): NULL, no length or data
)

// fixMessage is pg_logical_emit_message(true, 'walbox', 'hi') inside
// transaction 750.
var fixMessage = cat(
	[]byte{'M'},  // Byte1('M'): logical decoding message
	[]byte{0x01}, // Int8: flags, 1 = transactional
	[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x00}, // Int64: message LSN 0/16B3700
	[]byte("walbox\x00"),           // String: prefix
	[]byte{0x00, 0x00, 0x00, 0x02}, // Int32: content length 2
	[]byte("hi"),                   // Byte2: content
)

// wire builds messages programmatically for tests that need many variants
// (benchmarks, round trips). The annotated fixtures above are the reference;
// wire is checked against them in TestWireBuilderMatchesFixtures.
type wire []byte

func (w wire) u8(v byte) wire     { return append(w, v) }
func (w wire) u16(v uint16) wire  { return binary.BigEndian.AppendUint16(w, v) }
func (w wire) u32(v uint32) wire  { return binary.BigEndian.AppendUint32(w, v) }
func (w wire) u64(v uint64) wire  { return binary.BigEndian.AppendUint64(w, v) }
func (w wire) str(s string) wire  { return append(append(w, s...), 0) }
func (w wire) raw(b []byte) wire  { return append(w, b...) }
func (w wire) text(s string) wire { return w.u8('t').u32(uint32(len(s))).raw([]byte(s)) }

// pgMicros is the inverse of pgTime. It subtracts the epoch offset in
// seconds before scaling, so it is exact for every time pgTime can return
// (t.UnixMicro would overflow near the ends of the int64 range).
func pgMicros(t time.Time) uint64 {
	return uint64((t.Unix()-microsecFromUnixEpochToY2K/1_000_000)*1_000_000 + int64(t.Nanosecond()/1000))
}

func beginMsg(finalLSN pglogrepl.LSN, t time.Time, xid uint32) []byte {
	return wire{'B'}.u64(uint64(finalLSN)).u64(pgMicros(t)).u32(xid)
}

func commitMsg(commitLSN, endLSN pglogrepl.LSN, t time.Time) []byte {
	return wire{'C'}.u8(0).u64(uint64(commitLSN)).u64(uint64(endLSN)).u64(pgMicros(t))
}

func relationMsg(r *Relation) []byte {
	w := wire{'R'}.u32(r.ID).str(r.Namespace).str(r.Name).u8('d').u16(uint16(len(r.Columns)))
	for _, c := range r.Columns {
		var flags byte
		if c.Key {
			flags = 1
		}
		w = w.u8(flags).str(c.Name).u32(c.TypeOID).u32(uint32(c.TypeModifier))
	}
	return w
}

// insertMsg encodes values; it is the inverse of decodeInsert, which the
// fuzz target uses as a round-trip property.
func insertMsg(relID uint32, values []Value) []byte {
	w := wire{'I'}.u32(relID).u8('N').u16(uint16(len(values)))
	for _, v := range values {
		switch v.Kind {
		case KindNull:
			w = w.u8('n')
		case KindUnchangedToast:
			w = w.u8('u')
		case KindText:
			w = w.u8('t').u32(uint32(len(v.Data))).raw(v.Data)
		case KindBinary:
			w = w.u8('b').u32(uint32(len(v.Data))).raw(v.Data)
		}
	}
	return w
}

func messageMsg(transactional bool, lsn pglogrepl.LSN, prefix string, content []byte) []byte {
	var flags byte
	if transactional {
		flags = 1
	}
	return wire{'M'}.u8(flags).u64(uint64(lsn)).str(prefix).u32(uint32(len(content))).raw(content)
}

// openTx returns a Decoder that has seen fixRelation and fixBegin, ready for
// fixInsert.
func openTx(tb interface {
	Helper()
	Fatalf(string, ...any)
}) *Decoder {
	tb.Helper()
	d := New()
	for _, m := range [][]byte{fixRelation, fixBegin} {
		if _, err := d.Decode(fixCommitLSN, m); err != nil {
			tb.Fatalf("priming decoder: %v", err)
		}
	}
	return d
}
