package pipeline

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hashicorp/golang-lru/v2/simplelru"

	"github.com/walbox/walbox/decoder"
)

// Outbox messages: a service may emit its events with
// pg_logical_emit_message(true, '<prefix>', '<json object>') in the business
// transaction instead of inserting outbox rows. The message lives only in the
// WAL, so there is no table to write, vacuum or clean up. Its JSON object has
// the outbox row's fields as keys ({"id": ..., "aggregate_type": ...,
// "aggregate_id": ..., "event_type": ..., "payload": {...}, "headers":
// {...}}); walbox turns it into an Insert of a synthetic relation whose
// columns are those keys, so the router, its column mapping and its
// invalid-row policy apply unchanged.

// messageRelations caches one synthetic relation per key set, so the
// router's per-relation binding cache keeps working for messages. Writers
// choose the keys, so the cache is bounded: a writer that varies its key
// set without end costs a re-bind per message, not unbounded memory.
type messageRelations struct {
	byKeys *simplelru.LRU[string, *decoder.Relation]
	nextID uint32
}

// maxMessageRelations bounds the distinct key sets remembered.
const maxMessageRelations = 1024

// messageRelationBase keeps synthetic relation ids clear of real table OIDs
// in practice; the router only needs them stable and distinct.
const messageRelationBase = 0xFFF00000

func (mr *messageRelations) get(prefix string, names []string, oids []uint32) *decoder.Relation {
	var sig strings.Builder
	for i, n := range names {
		fmt.Fprintf(&sig, "%s:%d,", n, oids[i])
	}
	if mr.byKeys == nil {
		mr.byKeys, _ = simplelru.NewLRU[string, *decoder.Relation](maxMessageRelations, nil) // size > 0: cannot fail
	}
	if rel, ok := mr.byKeys.Get(sig.String()); ok {
		return rel
	}
	rel := &decoder.Relation{ID: messageRelationBase + mr.nextID, Namespace: "pg_logical_emit_message", Name: prefix}
	mr.nextID++
	for i, n := range names {
		rel.Columns = append(rel.Columns, decoder.Column{Name: n, TypeOID: oids[i], TypeModifier: -1})
	}
	mr.byKeys.Add(sig.String(), rel)
	return rel
}

// messageInsert turns an outbox message into an Insert. JSON strings become
// text values, null becomes NULL, and any other JSON value keeps its JSON
// text (typed jsonb, so a payload object is sent exactly as written).
func (mr *messageRelations) messageInsert(m *decoder.Message) (*decoder.Insert, error) {
	dec := json.NewDecoder(bytes.NewReader(m.Content))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, fmt.Errorf("outbox message at %s (prefix %q) is not a JSON object: %.80q", m.LSN, m.Prefix, m.Content)
	}
	var (
		names  []string
		oids   []uint32
		values []decoder.Value
	)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("outbox message at %s (prefix %q): %w", m.LSN, m.Prefix, err)
		}
		key, _ := tok.(string)
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, fmt.Errorf("outbox message at %s (prefix %q), key %q: %w", m.LSN, m.Prefix, key, err)
		}
		v, oid := messageValue(raw)
		names, oids, values = append(names, key), append(oids, oid), append(values, v)
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("outbox message at %s (prefix %q): %w", m.LSN, m.Prefix, err)
	}
	if dec.More() {
		return nil, fmt.Errorf("outbox message at %s (prefix %q): trailing data after the JSON object", m.LSN, m.Prefix)
	}
	return &decoder.Insert{
		XID: m.XID, CommitLSN: m.CommitLSN, CommitTime: m.CommitTime, LSN: m.LSN,
		Relation: mr.get(m.Prefix, names, oids), Values: values,
	}, nil
}

func messageValue(raw json.RawMessage) (decoder.Value, uint32) {
	switch raw[0] {
	case 'n':
		return decoder.Value{Kind: decoder.KindNull}, decoder.TextOID
	case '"':
		var s string
		_ = json.Unmarshal(raw, &s) // valid: the decoder produced it
		return decoder.Value{Kind: decoder.KindText, Data: []byte(s)}, decoder.TextOID
	default:
		return decoder.Value{Kind: decoder.KindText, Data: raw}, decoder.JSONBOID
	}
}
