package decoder

import (
	"bytes"
	"time"

	"github.com/jackc/pglogrepl"
)

// Decoder turns pgoutput messages (protocol version 1, and 2 to 4 with
// SetStreaming) into Decoded values.
// It keeps the relation cache of the current walsender session and the
// identity of the open transaction, so it must see every message of the
// session, in order.
//
// Not safe for concurrent use: one replication loop owns it.
type Decoder struct {
	relations map[uint32]*Relation
	// last is the most recently used relation. An outbox stream is nearly
	// always one table, so this saves a map lookup per Insert.
	last *Relation

	inTx       bool
	xid        uint32
	commitLSN  pglogrepl.LSN
	commitTime time.Time

	// streaming accepts protocol version 2+ stream messages (stream.go);
	// inStream and streamXID track the open stream block.
	streaming bool
	inStream  bool
	streamXID uint32
}

// New returns a Decoder with an empty relation cache and no open transaction.
// The zero Decoder is equally ready to use.
func New() *Decoder {
	return &Decoder{relations: make(map[uint32]*Relation)}
}

// Decode parses one message: data is XLogData.WALData, walStart is
// XLogData.WALStart.
//
// Decode never panics and never retains data: every byte slice in the result
// is a copy, because WALData points into pgproto3's read buffer, which the
// next receive overwrites.
//
// On success the result is one of *Begin, *Commit, *Relation, *Insert,
// *Message or *Ignored, and with SetStreaming also *StreamStart,
// *StreamStop, *StreamCommit, *StreamAbort or (between StreamStart and
// StreamStop) *StreamChange. A returned *Relation is also the cached one that
// later Inserts point to; treat it as read-only.
//
// On failure the error is an *Error wrapping ErrMalformed,
// ErrUnknownRelation, ErrProtocol, ErrStreamingUnsupported or
// ErrUnknownMessage, and the Decoder's state is unchanged.
func (d *Decoder) Decode(walStart pglogrepl.LSN, data []byte) (out Decoded, err error) {
	// The parser checks every length itself; this recover is the second line
	// of defence. A panic here would kill the replication loop without a
	// position to report, whereas an error stops it cleanly at this LSN.
	defer func() {
		if r := recover(); r != nil {
			var typ byte
			if len(data) > 0 {
				typ = data[0]
			}
			out, err = nil, &Error{LSN: walStart, Type: typ, Err: &panicError{value: r}}
		}
	}()

	if len(data) == 0 {
		return nil, newError(walStart, 0, ErrMalformed, "empty message")
	}
	if d.streaming {
		if out, ok, err := d.decodeStream(walStart, data); ok {
			return out, err
		}
	}
	switch typ := data[0]; typ {
	case msgInsert:
		return d.decodeInsert(walStart, data)
	case msgBegin:
		return d.decodeBegin(walStart, data)
	case msgCommit:
		return d.decodeCommit(walStart, data)
	case msgRelation:
		return d.decodeRelation(walStart, data)
	case msgMessage:
		return d.decodeMessage(walStart, data)
	case msgUpdate, msgDelete:
		// Not parsed beyond the relation they change (see Ignored).
		ig := &Ignored{Kind: typ}
		if len(data) >= 5 {
			ig.Relation = d.relations[be32(data[1:])]
		}
		return ig, nil
	case msgTruncate, msgType, msgOrigin:
		// Not parsed: walbox only reads inserts into the outbox, and nothing
		// in these messages changes what later messages mean (Type messages
		// only name custom types, which the OIDs in Relation already identify).
		return &Ignored{Kind: typ}, nil
	case msgStreamStart, msgStreamStop, msgStreamCommit, msgStreamAbort:
		return nil, &Error{LSN: walStart, Type: typ, Err: ErrStreamingUnsupported}
	default:
		return nil, newError(walStart, typ, ErrUnknownMessage,
			"type byte %#04x (walbox speaks proto_version 1 without two_phase; check the plugin options)", typ)
	}
}

// Reset forgets the open transaction and the relation cache. Call it after a
// reconnect: a new walsender session re-sends Relation messages and restarts
// from a transaction boundary.
//
// Relations already returned stay valid; they are only dropped from the cache.
func (d *Decoder) Reset() {
	clear(d.relations)
	d.last = nil
	d.inTx = false
	d.xid = 0
	d.commitLSN = 0
	d.commitTime = time.Time{}
	d.inStream = false
	d.streamXID = 0
}

// InTransaction reports whether a Begin was seen without its Commit.
func (d *Decoder) InTransaction() bool { return d.inTx }

// decodeBegin parses
//
//	Byte1('B') Int64 final LSN, Int64 commit time, Int32 xid
func (d *Decoder) decodeBegin(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	if len(data) != beginLen {
		return nil, newError(walStart, msgBegin, ErrMalformed, "length %d, want %d", len(data), beginLen)
	}
	b := &Begin{
		CommitLSN:  pglogrepl.LSN(be64(data[1:])),
		CommitTime: pgTime(int64(be64(data[9:]))),
		XID:        be32(data[17:]),
	}
	// Postgres' own subscriber refuses this too: the final LSN is the
	// transaction's position, and 0 is no position.
	if b.CommitLSN == 0 {
		return nil, newError(walStart, msgBegin, ErrMalformed, "final LSN of xid %d is 0/0", b.XID)
	}
	if d.inTx {
		return nil, newError(walStart, msgBegin, ErrProtocol,
			"begin of xid %d while xid %d (commit LSN %s) is still open", b.XID, d.xid, d.commitLSN)
	}
	d.inTx = true
	d.xid = b.XID
	d.commitLSN = b.CommitLSN
	d.commitTime = b.CommitTime
	return b, nil
}

// decodeCommit parses
//
//	Byte1('C') Int8 flags (always 0), Int64 commit LSN, Int64 end LSN, Int64 commit time
func (d *Decoder) decodeCommit(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	if len(data) != commitLen {
		return nil, newError(walStart, msgCommit, ErrMalformed, "length %d, want %d", len(data), commitLen)
	}
	// Like Postgres' own subscriber, refuse flags: none is defined for
	// protocol version 1, so a set bit means garbled bytes.
	if data[1] != 0 {
		return nil, newError(walStart, msgCommit, ErrMalformed, "flags %#04x, want 0", data[1])
	}
	c := &Commit{
		CommitLSN:  pglogrepl.LSN(be64(data[2:])),
		EndLSN:     pglogrepl.LSN(be64(data[10:])),
		CommitTime: pgTime(int64(be64(data[18:]))),
	}
	// The end LSN is what gets confirmed to the server; a garbled one could
	// confirm past events not yet delivered, so it must at least follow the
	// commit record it ends.
	if c.EndLSN <= c.CommitLSN {
		return nil, newError(walStart, msgCommit, ErrMalformed,
			"end LSN %s is not after commit LSN %s", c.EndLSN, c.CommitLSN)
	}
	if !d.inTx {
		return nil, newError(walStart, msgCommit, ErrProtocol,
			"commit (commit LSN %s) without a Begin", c.CommitLSN)
	}
	if c.CommitLSN != d.commitLSN {
		return nil, newError(walStart, msgCommit, ErrProtocol,
			"commit LSN %s differs from the final LSN %s announced by Begin of xid %d",
			c.CommitLSN, d.commitLSN, d.xid)
	}
	d.inTx = false
	d.xid = 0
	d.commitLSN = 0
	d.commitTime = time.Time{}
	return c, nil
}

// decodeMessage parses a logical decoding message (pg_logical_emit_message):
//
//	Byte1('M') Int8 flags (1 = transactional, else 0), Int64 LSN, String prefix,
//	Int32 content length, Byte[n] content
func (d *Decoder) decodeMessage(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	const fixedLen = 1 + 1 + 8 // type, flags, LSN
	if len(data) < fixedLen+1+4 {
		return nil, newError(walStart, msgMessage, ErrMalformed, "length %d, want at least %d", len(data), fixedLen+1+4)
	}
	// pgoutput writes 1 for a transactional message and 0 otherwise.
	if data[1] > 1 {
		return nil, newError(walStart, msgMessage, ErrMalformed, "flags %#04x, want 0 or 1", data[1])
	}
	transactional := data[1] == 1
	lsn := pglogrepl.LSN(be64(data[2:]))
	prefix, off, ok := cstring(data, fixedLen)
	if !ok {
		return nil, newError(walStart, msgMessage, ErrMalformed, "prefix is not NUL-terminated")
	}
	if len(data)-off < 4 {
		return nil, newError(walStart, msgMessage, ErrMalformed, "truncated before content length")
	}
	n := int64(be32(data[off:]))
	off += 4
	if rest := int64(len(data) - off); n != rest {
		return nil, newError(walStart, msgMessage, ErrMalformed,
			"content length %d but %d bytes follow", n, rest)
	}
	if transactional && !d.inTx {
		return nil, newError(walStart, msgMessage, ErrProtocol,
			"transactional message (prefix %q) outside a transaction", prefix)
	}
	m := &Message{
		LSN:           lsn,
		Transactional: transactional,
		Prefix:        prefix,
		Content:       bytes.Clone(data[off:]), // non-nil even when empty
	}
	if transactional {
		m.XID = d.xid
		m.CommitLSN = d.commitLSN
		m.CommitTime = d.commitTime
	}
	return m, nil
}
