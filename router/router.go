package router

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/hashicorp/golang-lru/v2/simplelru"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
)

// Header keys set by the router.
const (
	HeaderEventID   = "event_id"
	HeaderEventType = "event_type"

	// Dead-letter records also carry these.
	HeaderError   = "walbox_error"   // why the row was dead-lettered
	HeaderTable   = "walbox_table"   // schema.table
	HeaderLSN     = "walbox_lsn"     // WAL position, as pglogrepl.LSN.String()
	HeaderXID     = "walbox_xid"     // writing transaction id, decimal
	HeaderHeaders = "walbox_headers" // the raw headers column, when it was the problem
)

// Bounds on the interning caches. Topics and header keys come from a small,
// fixed vocabulary in any sane outbox, so these are never reached in steady
// state; they only stop a writer bug (a unique topic per row) from growing the
// caches without limit. When full, a cache is cleared and refilled.
const (
	maxCachedTopics     = 4096
	maxCachedHeaderKeys = 4096
)

// maxCachedRelations bounds the per-relation bindings. A relation is bound
// again when Postgres re-announces it (DDL replaces the entry, it does not
// add one), so only distinct relation OIDs grow the cache: tables added to
// the publication, or an outbox dropped and recreated. The least recently
// used binding is evicted; a relation met again is simply bound again.
const maxCachedRelations = 256

// inlineHeaders is how many headers share the record's allocation. Classic
// rows carry event_id, event_type and a couple of tracing headers.
const inlineHeaders = 4

// Routed is the result of routing one row.
type Routed struct {
	// Record is the record to produce, with Topic, Key, Value and Headers
	// set; never nil when Route returns no error. Its Key, Value and header
	// values may share memory with the Insert's values, which the decoder
	// hands over as owned: neither side may modify them.
	Record *kgo.Record
	// EventID is the id column as text, "" when there is none or it is NULL.
	// It is the dedup key consumers see in the event_id header.
	EventID string
	// DeadLetter is true when the row was invalid and Record goes to the
	// dead-letter topic.
	DeadLetter bool
	// Reason says why the row was dead-lettered; "" otherwise.
	Reason string
}

// Router turns inserted outbox rows into Kafka records. It caches per-table
// column positions, rendered topics and header keys, so it is not safe for
// concurrent use: give each goroutine its own Router.
type Router struct {
	cfg  Config
	tmpl *template // nil when a topic column is configured

	id, aggID, eventType, topic ref
	payload, headers            ref

	last   *binding
	binds  *simplelru.LRU[uint32, *binding] // by relation OID, at most maxCachedRelations
	topics map[string]string
	hkeys  map[string]string

	buf     []byte   // topic rendering scratch
	members []member // headers scratch

	// The JSON document validated last in the current Route call and the
	// result. Several settings commonly read one column (watermill's
	// metadata), and json.Valid is the costliest step of a row; Route
	// resets the memo, so it never outlives the row whose memory it names.
	validPtr *byte
	validLen int
	validOK  bool
}

// jsonValid is json.Valid, memoised for the current row.
func (r *Router) jsonValid(doc []byte) bool {
	if len(doc) == 0 {
		return false
	}
	if &doc[0] == r.validPtr && len(doc) == r.validLen {
		return r.validOK
	}
	r.validPtr, r.validLen, r.validOK = &doc[0], len(doc), json.Valid(doc)
	return r.validOK
}

// New validates cfg (see Config.Validate), applies its defaults and returns a
// Router.
func New(cfg Config) (*Router, error) {
	cfg, tmpl, err := cfg.compile()
	if err != nil {
		return nil, err
	}
	binds, err := simplelru.NewLRU[uint32, *binding](maxCachedRelations, nil)
	if err != nil {
		return nil, fmt.Errorf("router: binding cache: %w", err) // only for a size <= 0
	}
	r := &Router{
		cfg:    cfg,
		tmpl:   tmpl,
		binds:  binds,
		topics: make(map[string]string),
		hkeys:  make(map[string]string),
	}
	// compile already parsed every name, so these cannot fail.
	r.id, _ = parseRef(cfg.Columns.ID)
	r.aggID, _ = parseRef(cfg.Columns.AggregateID)
	r.eventType, _ = parseRef(cfg.Columns.EventType)
	r.payload, _ = parseRef(cfg.Columns.Payload)
	r.headers, _ = parseRef(cfg.Columns.Headers)
	if cfg.Columns.Topic != "" {
		r.topic, _ = parseRef(cfg.Columns.Topic)
	}
	return r, nil
}

// binding is a relation's column positions for every configured name, -1
// where the table lacks the column. Resolving once per Relation message keeps
// name lookups off the per-row path.
type binding struct {
	rel                                          *decoder.Relation
	id, aggID, eventType, topic, payload, header int
	tmpl                                         []int // per template placeholder
}

// bind returns the binding for rel. The decoder hands out a new *Relation
// whenever Postgres announces a (possibly changed) table definition, so a new
// pointer for a known ID means columns may have moved and are resolved again.
func (r *Router) bind(rel *decoder.Relation) *binding {
	if b := r.last; b != nil && b.rel == rel {
		return b
	}
	b, ok := r.binds.Get(rel.ID)
	if !ok || b.rel != rel {
		b = &binding{
			rel:       rel,
			id:        rel.ColumnIndex(r.id.column),
			aggID:     rel.ColumnIndex(r.aggID.column),
			eventType: rel.ColumnIndex(r.eventType.column),
			topic:     -1,
			payload:   rel.ColumnIndex(r.payload.column),
			header:    rel.ColumnIndex(r.headers.column),
		}
		if r.topic.column != "" {
			b.topic = rel.ColumnIndex(r.topic.column)
		}
		if r.tmpl != nil {
			b.tmpl = make([]int, len(r.tmpl.refs))
			for i, rf := range r.tmpl.refs {
				b.tmpl[i] = rel.ColumnIndex(rf.column)
			}
		}
		r.binds.Add(rel.ID, b)
	}
	r.last = b
	return b
}

// fieldState says whether a configured column yielded a value for a row.
type fieldState uint8

const (
	fieldOK        fieldState = iota
	fieldNoColumn             // the table has no such column
	fieldNull                 // SQL NULL
	fieldToast                // unchanged TOAST: the value was not sent
	fieldBadKind              // a value kind the decoder does not define
	fieldNoKey                // column->>key: no such key
	fieldJSONNull             // column->>key: the key's value is JSON null
	fieldNotObject            // column->>key: the column is not a JSON object
)

// absent reports states that merely mean "no value", acceptable for optional
// columns. The others mean the row is broken whatever the column's role.
func (s fieldState) absent() bool {
	return s == fieldNoColumn || s == fieldNull || s == fieldNoKey || s == fieldJSONNull
}

// field returns the text of rf for the row, idx being rf's column position.
func (r *Router) field(ins *decoder.Insert, idx int, rf *ref) ([]byte, fieldState) {
	if idx < 0 {
		return nil, fieldNoColumn
	}
	v := &ins.Values[idx]
	switch v.Kind {
	case decoder.KindText, decoder.KindBinary:
	case decoder.KindNull:
		return nil, fieldNull
	case decoder.KindUnchangedToast:
		return nil, fieldToast
	default:
		return nil, fieldBadKind
	}
	if !rf.json {
		return v.Data, fieldOK
	}
	doc := jsonDoc(ins.Relation.Columns[idx].TypeOID, v)
	if !r.jsonValid(doc) {
		return nil, fieldNotObject
	}
	return jsonGet(doc, rf.key)
}

// describe explains a non-OK state for an error message.
func describe(role string, rf *ref, st fieldState, table string) string {
	var what string
	switch st {
	case fieldNoColumn:
		what = "table " + table + " has no column " + strconv.Quote(rf.column)
	case fieldNull:
		what = "column " + strconv.Quote(rf.column) + " is NULL"
	case fieldToast:
		what = "column " + strconv.Quote(rf.column) + " is an unchanged TOAST value the server did not send, " +
			"which an INSERT cannot carry (a malformed stream or a decoder bug)"
	case fieldBadKind:
		what = "column " + strconv.Quote(rf.column) + " has a value kind the decoder does not define"
	case fieldNoKey:
		what = "column " + strconv.Quote(rf.column) + " has no key " + strconv.Quote(rf.key)
	case fieldJSONNull:
		what = "key " + strconv.Quote(rf.key) + " of column " + strconv.Quote(rf.column) + " is JSON null"
	case fieldNotObject:
		what = "column " + strconv.Quote(rf.column) + " is not a JSON object, so ->> cannot read key " + strconv.Quote(rf.key)
	default:
		what = "unknown state"
	}
	return role + ": " + what
}

// row collects what Route computed for one row, including the first problem.
type row struct {
	id, key, value, eventType []byte
	hasID, hasKey, hasValue   bool
	hasEventType, headersOK   bool
	badHeaders                []byte // raw headers value when it was not an object
	members                   []member
	topic                     string

	bad                  bool
	badColumn, badReason string // the first problem found
}

func (w *row) fail(column, reason string) {
	if !w.bad {
		w.bad, w.badColumn, w.badReason = true, column, reason
	}
}

// Route maps one inserted outbox row to a Kafka record. An invalid row is an
// *InvalidRowError under PolicyFail and a dead-letter record under
// PolicyDeadLetter; any other error (a nil relation, a tuple whose width
// disagrees with its relation) is a caller bug and returned under either
// policy. Not safe for concurrent use.
func (r *Router) Route(ins *decoder.Insert) (Routed, error) {
	if ins == nil || ins.Relation == nil {
		return Routed{}, errors.New("router: Route called with a nil insert or relation")
	}
	rel := ins.Relation
	if len(ins.Values) != len(rel.Columns) {
		return Routed{}, fmt.Errorf("router: insert into %s at LSN %s has %d values for %d columns",
			rel.QualifiedName(), ins.LSN, len(ins.Values), len(rel.Columns))
	}
	b := r.bind(rel)
	r.validPtr = nil
	var w row

	var st fieldState
	if w.id, st = r.field(ins, b.id, &r.id); st == fieldOK {
		w.hasID = true
	} else if !st.absent() {
		w.fail(r.id.spec, describe("event id", &r.id, st, rel.QualifiedName()))
	}

	if w.key, st = r.field(ins, b.aggID, &r.aggID); st == fieldOK {
		w.hasKey = true
	} else {
		w.fail(r.aggID.spec, describe("aggregate id", &r.aggID, st, rel.QualifiedName()))
	}

	if w.value, st = r.field(ins, b.payload, &r.payload); st == fieldOK {
		w.hasValue = true
		v := &ins.Values[b.payload]
		if v.Kind == decoder.KindText && rel.Columns[b.payload].TypeOID == decoder.ByteaOID {
			raw, err := decoder.DecodeBytea(v.Data)
			if err != nil {
				// Dead-lettered with the text form, which still says what arrived.
				w.fail(r.payload.spec, "payload: column "+strconv.Quote(r.payload.column)+
					" is not valid bytea text output: "+err.Error())
			} else {
				w.value = raw
			}
		}
	} else {
		w.fail(r.payload.spec, describe("payload", &r.payload, st, rel.QualifiedName()))
	}

	if w.eventType, st = r.field(ins, b.eventType, &r.eventType); st == fieldOK {
		w.hasEventType = true
	} else if !st.absent() {
		w.fail(r.eventType.spec, describe("event type", &r.eventType, st, rel.QualifiedName()))
	}

	w.headersOK = true
	if doc, st := r.field(ins, b.header, &r.headers); st == fieldOK {
		doc = jsonDoc(rel.Columns[b.header].TypeOID, &ins.Values[b.header])
		problem := "not valid JSON"
		if r.jsonValid(doc) {
			r.members, problem = scanObject(doc, r.members[:0])
		}
		if problem != "" {
			w.headersOK = false
			w.badHeaders = doc
			w.fail(r.headers.spec, "headers: column "+strconv.Quote(r.headers.column)+" is "+problem+
				" (it must be a JSON object whose keys become record headers)")
		} else {
			w.members = r.members
		}
	} else if !st.absent() {
		w.headersOK = false
		w.fail(r.headers.spec, describe("headers", &r.headers, st, rel.QualifiedName()))
	}

	if !w.bad {
		r.routeTopic(ins, b, &w)
	}
	if !w.bad && r.cfg.CloudEvents.enabled() {
		r.ceCheck(&w)
	}
	if !w.bad && (r.cfg.Values != nil || r.cfg.Keys != nil) {
		// Schema registry formats (encode.go).
		if err := r.encode(&w); err != nil {
			return Routed{}, r.encodeError(ins, &w, err)
		}
	}
	if w.bad {
		return r.invalid(ins, &w)
	}

	n := len(w.members)
	if w.hasID {
		n++
	}
	if w.hasEventType {
		n++
	}
	rec := newRecord(n)
	rec.Topic, rec.Key, rec.Value = w.topic, w.key, w.value
	rec.Timestamp = ins.CommitTime
	r.appendHeaders(rec, &w)
	if r.cfg.CloudEvents.enabled() {
		r.ceApply(ins, rec, &w)
	}
	out := Routed{Record: rec}
	if w.hasID {
		out.EventID = string(w.id)
	}
	return out, nil
}

// routeTopic sets w.topic from the topic column or the template.
func (r *Router) routeTopic(ins *decoder.Insert, b *binding, w *row) {
	table := ins.Relation.QualifiedName
	if r.tmpl == nil {
		data, st := r.field(ins, b.topic, &r.topic)
		if st != fieldOK {
			w.fail(r.topic.spec, describe("topic", &r.topic, st, table()))
			return
		}
		t, why := r.intern(data)
		if why != "" {
			w.fail(r.topic.spec, "topic: column "+strconv.Quote(r.topic.spec)+" holds "+strconv.Quote(string(data))+": "+why)
			return
		}
		w.topic = t
		return
	}
	r.buf = r.buf[:0]
	for _, s := range r.tmpl.segs {
		if s.ref < 0 {
			r.buf = append(r.buf, s.lit...)
			continue
		}
		rf := &r.tmpl.refs[s.ref]
		data, st := r.field(ins, b.tmpl[s.ref], rf)
		if st != fieldOK {
			w.fail(rf.spec, describe("topic template placeholder {"+r.tmpl.names[s.ref]+"}", rf, st, table()))
			return
		}
		if len(data) == 0 {
			// "outbox.event." is a legal name but never the intended one.
			w.fail(rf.spec, "topic template placeholder {"+r.tmpl.names[s.ref]+"}: value is empty")
			return
		}
		r.buf = append(r.buf, data...)
	}
	t, why := r.intern(r.buf)
	if why != "" {
		w.fail(r.tmpl.columns, "topic: template "+strconv.Quote(r.cfg.TopicTemplate)+" rendered "+strconv.Quote(string(r.buf))+": "+why)
		return
	}
	w.topic = t
}

// intern returns the topic string for name, validating and storing it on
// first sight, so steady state reuses one string per topic.
func (r *Router) intern(name []byte) (string, string) {
	if t, ok := r.topics[string(name)]; ok { // no allocation: map index by converted []byte
		return t, ""
	}
	if why := topicProblem(name); why != "" {
		return "", why
	}
	if len(r.topics) >= maxCachedTopics {
		clear(r.topics)
	}
	t := string(name)
	r.topics[t] = t
	return t, ""
}

// headerKey interns a header key from the headers column.
func (r *Router) headerKey(m *member) string {
	if m.keyEsc {
		return unquoteKey(m.key)
	}
	if k, ok := r.hkeys[string(m.key)]; ok {
		return k
	}
	if len(r.hkeys) >= maxCachedHeaderKeys {
		clear(r.hkeys)
	}
	k := string(m.key)
	r.hkeys[k] = k
	return k
}

// recordBox lets a record and a few headers share one allocation.
type recordBox struct {
	rec kgo.Record
	hdr [inlineHeaders]kgo.RecordHeader
}

func newRecord(headers int) *kgo.Record {
	if headers <= inlineHeaders {
		box := new(recordBox)
		box.rec.Headers = box.hdr[:0]
		return &box.rec
	}
	return &kgo.Record{Headers: make([]kgo.RecordHeader, 0, headers)}
}

// appendHeaders adds event_id, event_type and the row's headers, in that
// order; the row's headers keep their document order, duplicates included
// (Kafka headers are a multimap; a consumer reading the last value sees the
// one Postgres's json operators would).
func (r *Router) appendHeaders(rec *kgo.Record, w *row) {
	if w.hasID {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderEventID, Value: w.id})
	}
	if w.hasEventType {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderEventType, Value: w.eventType})
	}
	for i := range w.members {
		m := &w.members[i]
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: r.headerKey(m), Value: valueText(m.val)})
	}
}

// invalid applies the invalid-row policy to w.
func (r *Router) invalid(ins *decoder.Insert, w *row) (Routed, error) {
	var eventID string
	if w.hasID {
		eventID = string(w.id)
	}
	table := ins.Relation.QualifiedName()
	if r.cfg.InvalidRows != PolicyDeadLetter {
		return Routed{}, &InvalidRowError{
			EventID: eventID,
			LSN:     ins.LSN,
			XID:     ins.XID,
			Table:   table,
			Column:  w.badColumn,
			Reason:  w.badReason,
		}
	}
	if !w.headersOK {
		w.members = nil
	}
	n := len(w.members) + 6
	rec := &kgo.Record{Topic: r.cfg.DeadLetterTopic, Timestamp: ins.CommitTime, Headers: make([]kgo.RecordHeader, 0, n)}
	if w.hasKey {
		rec.Key = w.key
	}
	if w.hasValue {
		rec.Value = w.value
	}
	r.appendHeaders(rec, w)
	if w.badHeaders != nil {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderHeaders, Value: w.badHeaders})
	}
	rec.Headers = append(rec.Headers,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(w.badReason)},
		kgo.RecordHeader{Key: HeaderTable, Value: []byte(table)},
		kgo.RecordHeader{Key: HeaderLSN, Value: []byte(ins.LSN.String())},
		kgo.RecordHeader{Key: HeaderXID, Value: strconv.AppendUint(nil, uint64(ins.XID), 10)},
	)
	return Routed{Record: rec, EventID: eventID, DeadLetter: true, Reason: w.badReason}, nil
}
