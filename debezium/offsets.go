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
	// Snapshot is true while Debezium's initial snapshot had not finished
	// ("snapshot" or "last_snapshot_record" present and true).
	Snapshot bool
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
	for _, k := range []string{"snapshot", "last_snapshot_record"} {
		if raw, ok := m[k]; ok && (string(raw) == "true" || string(raw) == `"true"`) {
			o.Snapshot = true
		}
	}
	if o.LSN == 0 && o.LSNProc == 0 && o.LSNCommit == 0 {
		return Offset{}, fmt.Errorf("%w: offset value %q has no lsn, lsn_proc or lsn_commit", ErrOffsets, truncate(value))
	}
	return o, nil
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
