package debezium

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

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
	// MessageType is the kind of the last message Debezium processed, at
	// LSN ("messageType": INSERT, UPDATE, DELETE, TRUNCATE, MESSAGE,
	// BEGIN, COMMIT; Debezium 2.1.4, 2.2 and later), "" when absent.
	MessageType string
	// LSNEventsProcessed is how many change events at LSN Debezium had
	// processed in transaction TxID ("lsn_events_processed", Debezium 3.7
	// and later, written only when not 0): the rows of one COPY share one
	// LSN. 0 when absent.
	LSNEventsProcessed int64
	// IncrementalSnapshot is the value of "incremental_snapshot_collections"
	// (the tables of a running incremental snapshot), "" when absent.
	IncrementalSnapshot string
}

// The offset keys Debezium's Postgres connector writes (PostgresOffsetContext
// and SourceInfo, 1.x to 3.x): the ones walbox reads, and the ones that do
// not change which events the offset covers. Any other key is refused
// (ParseOffset): walbox cannot tell what it says about the events sent.
var (
	offsetKeysRead = []string{"lsn", "lsn_proc", "lsn_commit", "txId", "ts_usec", "messageType", "lsn_events_processed",
		"snapshot", "snapshot_completed", "last_snapshot_record"}
	// xmin is the slot's xmin at the last event (xmin.fetch.interval.ms);
	// transaction_id and transaction_data_collection_order_<table> are the
	// transaction metadata topic's counters (provide.transaction.metadata).
	offsetKeysIgnored = []string{"xmin", "transaction_id"}
	// offsetKeyPrefixIgnored are key prefixes that do not change which
	// events the offset covers.
	offsetKeyPrefixIgnored = []string{"transaction_data_collection_order_"}
	// offsetKeyPrefixIncremental is the prefix of an incremental
	// snapshot's state, written only while one runs.
	offsetKeyPrefixIncremental = "incremental_snapshot"
)

// Message types of a Debezium offset (ReplicationMessage.Operation).
const (
	MessageBegin  = "BEGIN"
	MessageCommit = "COMMIT"
)

// isChange reports whether a messageType is a change event
// (incrementLsnEventsProcessed counts them).
func isChange(messageType string) bool {
	switch messageType {
	case "INSERT", "UPDATE", "DELETE", "TRUNCATE":
		return true
	}
	return false
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
	str := func(key string, dst *string) error {
		raw, ok := m[key]
		if !ok || string(raw) == "null" {
			return nil
		}
		if json.Unmarshal(raw, dst) != nil {
			return fmt.Errorf("%w: offset field %q = %s is not a string", ErrOffsets, key, truncate(raw))
		}
		return nil
	}
	if err := errors.Join(lsn("lsn", &o.LSN), lsn("lsn_proc", &o.LSNProc), lsn("lsn_commit", &o.LSNCommit),
		num("txId", &o.TxID), num("ts_usec", &o.TsUsec), num("lsn_events_processed", &o.LSNEventsProcessed),
		str("messageType", &o.MessageType), unknownKeys(m)); err != nil {
		return Offset{}, err
	}
	if o.LSNEventsProcessed < 0 {
		return Offset{}, fmt.Errorf("%w: offset field \"lsn_events_processed\" = %d is negative; Debezium writes the count of events processed at lsn", ErrOffsets, o.LSNEventsProcessed)
	}
	o.IncrementalSnapshot = incrementalSnapshot(m)
	o.SnapshotType, o.Snapshot = snapshotRunning(m)
	if o.LSN == 0 && o.LSNProc == 0 && o.LSNCommit == 0 {
		return Offset{}, fmt.Errorf("%w: offset value %q has no lsn, lsn_proc or lsn_commit", ErrOffsets, truncate(value))
	}
	return o, nil
}

// incrementalSnapshot returns the tables of the incremental snapshot an
// offset says is running, "" when none is. Debezium writes the
// incremental_snapshot_* keys only while one runs (with
// incremental_snapshot_collections naming its tables); any of them with a
// value counts, so that no running snapshot is taken for none.
func incrementalSnapshot(m map[string]json.RawMessage) string {
	var keys []string
	for k, raw := range m {
		if !strings.HasPrefix(k, offsetKeyPrefixIncremental) {
			continue
		}
		switch v := string(raw); v {
		case "null", `""`, "[]", `"[]"`:
			continue
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return ""
	}
	raw, ok := m[offsetKeyPrefixIncremental+"_collections"]
	if !ok {
		slices.Sort(keys)
		return strings.Join(keys, ", ")
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return truncate([]byte(s))
	}
	return truncate(raw)
}

// unknownKeys refuses the keys of an offset value that Debezium's Postgres
// connector does not write, naming them: walbox dropped
// lsn_events_processed silently before it knew the key, and lost the rows
// of a COPY that Debezium had not sent.
func unknownKeys(m map[string]json.RawMessage) error {
	var unknown []string
	for k := range m {
		if slices.Contains(offsetKeysRead, k) || slices.Contains(offsetKeysIgnored, k) || strings.HasPrefix(k, offsetKeyPrefixIncremental) ||
			slices.ContainsFunc(offsetKeyPrefixIgnored, func(p string) bool { return strings.HasPrefix(k, p) }) {
			continue
		}
		unknown = append(unknown, k)
	}
	if len(unknown) == 0 {
		return nil
	}
	slices.Sort(unknown)
	return fmt.Errorf("%w: the offset has the field(s) %q, which walbox does not know (it reads %q and ignores %q and %s*, which do not change which events the offset covers); "+
		"it cannot tell whether taking over from this offset would skip events Debezium never sent, so it refuses: "+
		"check that the offset is Debezium's Postgres connector's, or upgrade walbox to a version that reads these fields",
		ErrOffsets, unknown, offsetKeysRead, offsetKeysIgnored, offsetKeyPrefixIgnored[0])
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

// SentAtLSN returns how many of atLSN change events at the offset's LSN
// (inserts of transaction TxID that share LSN: the rows of one COPY, a
// heap_multi_insert, all have the same LSN) the offset says Debezium had
// sent. Events of TxID before LSN were all sent (Debezium processes a
// transaction's changes in LSN order), events after it none. beginAtLSN
// says that the transaction's Begin is at LSN too (pgoutput sends it at
// the first change's LSN, so when a COPY opens the transaction).
//
//   - COMMIT: Debezium processed the transaction's commit, so all of it.
//   - A change (INSERT, UPDATE, DELETE, TRUNCATE): lsn_events_processed of
//     them when present (Debezium 3.7+ counts the events processed at lsn
//     in the transaction); without it, one: the offset is that of an
//     event at lsn, so at least the first was processed, and the others of
//     a COPY may not have been (they are sent again: duplicates, not loss).
//     With beginAtLSN, one fewer than lsn_events_processed (when over 1):
//     a Debezium that restarted from an offset inside those events counts
//     the Begin among the messages at lsn (WalPositionLocator's search and
//     skip see every message at it, the Begin included), so it skips one
//     event fewer than the count, sends that one again, and stamps it and
//     every later one with one more than the events it has sent.
//   - BEGIN: the offset was stored right after the transaction's Begin
//     (a heartbeat carries it), whose LSN is its first change's: none.
//   - MESSAGE, an absent messageType (Debezium before 2.1.4, where lsn may be
//     a Begin's too) or an unknown one: none.
func (o Offset) SentAtLSN(atLSN int, beginAtLSN bool) int {
	switch {
	case o.MessageType == MessageCommit:
		return atLSN
	case isChange(o.MessageType):
		n := o.LSNEventsProcessed
		if n > 1 && beginAtLSN {
			n--
		}
		if n <= 0 {
			n = 1
		}
		return int(min(n, int64(atLSN)))
	}
	return 0
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
