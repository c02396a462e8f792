package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
)

// ErrOffsets marks offsets that cannot be read or do not hold the
// connector's position.
var ErrOffsets = errors.New("debezium: offsets")

// Offset is the source offset Kafka Connect stored for Debezium's Postgres
// connector. Debezium tells the server (confirms on the slot) LSNCommit,
// or LSNProc when there is no LSNCommit, and only once Connect has stored
// the offset holding it; on a restart it resumes at LSN and skips the
// events of transaction TxID up to LSN that it had already sent.
type Offset struct {
	// LSN is the position of the last event Debezium produced ("lsn").
	LSN pglogrepl.LSN
	// LSNProc is the last completely processed position ("lsn_proc"), 0
	// when absent.
	LSNProc pglogrepl.LSN
	// LSNCommit is the end of the last transaction whose commit Debezium
	// processed ("lsn_commit"), 0 when absent.
	LSNCommit pglogrepl.LSN
	// TxID is the transaction of the last event ("txId"), 0 when absent.
	TxID int64
	// TsUsec is the commit time of the last event, in microseconds since
	// the epoch ("ts_usec"), 0 when absent.
	TsUsec int64
	// Snapshot is true when the offset was stored by a snapshot that had
	// not finished: see snapshotRunning for the shapes of each version.
	Snapshot bool
	// SnapshotType is the offset's "snapshot" value as stored ("INITIAL",
	// "BLOCKING", "true"), "" when absent or false; it names the snapshot
	// in messages.
	SnapshotType string
}

// Flushed returns the position Debezium confirms on the slot for this
// offset: LSNCommit, else LSNProc, else LSN.
func (o Offset) Flushed() pglogrepl.LSN {
	switch {
	case o.LSNCommit != 0:
		return o.LSNCommit
	case o.LSNProc != 0:
		return o.LSNProc
	}
	return o.LSN
}

// OffsetKey is the Connect offset key of the Postgres connector named name
// with logical name prefix: ["<name>",{"server":"<prefix>"}].
func OffsetKey(name, prefix string) []byte {
	b, _ := json.Marshal([]any{name, map[string]string{"server": prefix}})
	return b
}

// MatchOffsetKey reports whether key (JSON, as Connect's internal
// JsonConverter wrote it) is the offset key of connector name with
// topic.prefix prefix.
func MatchOffsetKey(key []byte, name, prefix string) bool {
	var k []json.RawMessage
	if json.Unmarshal(key, &k) != nil || len(k) != 2 {
		return false
	}
	var n string
	var part map[string]any
	if json.Unmarshal(k[0], &n) != nil || json.Unmarshal(k[1], &part) != nil || n != name || len(part) != 1 {
		return false
	}
	s, ok := part["server"].(string)
	return ok && s == prefix
}

// ParseOffset reads an offset value (JSON).
func ParseOffset(value []byte) (Offset, error) {
	var m map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		return Offset{}, fmt.Errorf("%w: offset value %q is not a JSON object: %v", ErrOffsets, truncate(value), err)
	}
	var o Offset
	lsn := func(key string, dst *pglogrepl.LSN) error {
		raw, ok := m[key]
		if !ok || string(raw) == "null" {
			return nil
		}
		n, err := strconv.ParseUint(string(raw), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: offset field %q = %s is not an LSN (a whole number)", ErrOffsets, key, raw)
		}
		*dst = pglogrepl.LSN(n)
		return nil
	}
	num := func(key string, dst *int64) error {
		raw, ok := m[key]
		if !ok || string(raw) == "null" {
			return nil
		}
		n, err := strconv.ParseInt(string(raw), 10, 64)
		if err != nil {
			return fmt.Errorf("%w: offset field %q = %s is not a whole number", ErrOffsets, key, raw)
		}
		*dst = n
		return nil
	}
	if err := errors.Join(lsn("lsn", &o.LSN), lsn("lsn_proc", &o.LSNProc), lsn("lsn_commit", &o.LSNCommit),
		num("txId", &o.TxID), num("ts_usec", &o.TsUsec)); err != nil {
		return Offset{}, err
	}
	o.SnapshotType, o.Snapshot = snapshotRunning(m)
	if o.LSN == 0 && o.LSNProc == 0 && o.LSNCommit == 0 {
		return Offset{}, fmt.Errorf("%w: offset value %q has no lsn, lsn_proc or lsn_commit", ErrOffsets, truncate(value))
	}
	return o, nil
}

// snapshotRunning reads the snapshot fields of an offset value: the
// snapshot's type ("" when the offset is not from a snapshot) and whether
// that snapshot had not finished.
//
// Debezium 1.x and 2.x before 2.5 store "snapshot":true and
// "last_snapshot_record" (true on the snapshot's last record) while the
// snapshot runs, and neither once streaming. 2.5 and later (3.x) store the
// snapshot's type as an enum name ("snapshot":"INITIAL" or "BLOCKING")
// with "snapshot_completed", and still "last_snapshot_record". Debezium
// takes a snapshot as finished when either completion key is true, so
// walbox does too. Any other "snapshot" value (a type a later version
// adds) is taken as unfinished, and so is a completion key that is not a
// boolean: refusing a takeover is recoverable, skipping the rows an
// unfinished snapshot had not emitted is not.
func snapshotRunning(m map[string]json.RawMessage) (string, bool) {
	raw, ok := m["snapshot"]
	if !ok {
		return "", false
	}
	var typ string
	switch v := string(raw); v {
	case "null", "false", `"false"`, `""`:
		return "", false
	case "true":
		typ = v
	default:
		if json.Unmarshal(raw, &typ) != nil || typ == "" {
			typ = truncate(raw)
		}
	}
	isTrue := func(key string) bool {
		v := string(m[key])
		return v == "true" || v == `"true"`
	}
	return typ, !isTrue("snapshot_completed") && !isTrue("last_snapshot_record")
}

func truncate(b []byte) string {
	if len(b) > 200 {
		return string(b[:200]) + "..."
	}
	return string(b)
}

// FindOffset returns the offset of connector name (topic.prefix prefix)
// among entries (key, value pairs as stored; a nil value deletes). The
// error says which connectors the entries hold when none matches.
func FindOffset(entries [][2][]byte, name, prefix string) (Offset, error) {
	var (
		found  []byte
		seen   bool
		others []string
	)
	for _, e := range entries {
		if MatchOffsetKey(e[0], name, prefix) {
			found, seen = e[1], true // the last one wins, as in the offsets topic
			continue
		}
		others = append(others, string(e[0]))
	}
	if !seen || found == nil {
		why := "no offset"
		if seen {
			why = "a deleted offset (null value)"
		}
		return Offset{}, fmt.Errorf("%w: %s for connector %q with topic.prefix %q (key %s); the store holds %d other key(s) %q: check name and topic.prefix",
			ErrOffsets, why, name, prefix, OffsetKey(name, prefix), len(others), others)
	}
	return ParseOffset(found)
}
