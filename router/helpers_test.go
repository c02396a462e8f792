package router

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
)

// Fixture identity of every test row.
const (
	testXID = 771
	testLSN = pglogrepl.LSN(0x16B3748) // "0/16B3748"
)

// col builds a relation column.
func col(name string, oid uint32) decoder.Column {
	return decoder.Column{Name: name, TypeOID: oid, TypeModifier: -1}
}

func relation(id uint32, name string, cols ...decoder.Column) *decoder.Relation {
	return &decoder.Relation{ID: id, Namespace: "public", Name: name, Columns: cols}
}

// txt is a value in text form; null, toast and bin the other kinds.
func txt(s string) decoder.Value { return decoder.Value{Kind: decoder.KindText, Data: []byte(s)} }
func bin(b []byte) decoder.Value { return decoder.Value{Kind: decoder.KindBinary, Data: b} }

var (
	null  = decoder.Value{Kind: decoder.KindNull}
	toast = decoder.Value{Kind: decoder.KindUnchangedToast}
)

func insert(rel *decoder.Relation, vals ...decoder.Value) *decoder.Insert {
	return &decoder.Insert{
		XID:        testXID,
		CommitLSN:  testLSN + 0x100,
		CommitTime: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		LSN:        testLSN,
		Relation:   rel,
		Values:     vals,
	}
}

// classicRel is outbox.md shape 1.
func classicRel() *decoder.Relation {
	return relation(16390, "outbox",
		col("id", decoder.Int8OID),
		col("aggregate_type", decoder.TextOID),
		col("aggregate_id", decoder.TextOID),
		col("event_type", decoder.TextOID),
		col("payload", decoder.JSONBOID),
		col("headers", decoder.JSONBOID),
		col("created_at", decoder.TimestamptzOID),
		col("sent_at", decoder.TimestamptzOID),
		col("attempts", decoder.Int4OID),
		col("error", decoder.TextOID),
	)
}

// classicRow fills classicRel; override picks columns by name.
func classicRow(rel *decoder.Relation, override map[string]decoder.Value) *decoder.Insert {
	base := map[string]decoder.Value{
		"id":             txt("42"),
		"aggregate_type": txt("order"),
		"aggregate_id":   txt("o-1"),
		"event_type":     txt("OrderCreated"),
		"payload":        txt(`{"total": 12.5}`),
		"headers":        txt(`{"correlation_id": "c-1", "trace_id": "t-9"}`),
		"created_at":     txt("2025-01-02 03:04:05+00"),
		"sent_at":        null,
		"attempts":       txt("0"),
		"error":          null,
	}
	vals := make([]decoder.Value, len(rel.Columns))
	for i, c := range rel.Columns {
		v, ok := override[c.Name]
		if !ok {
			v = base[c.Name]
		}
		vals[i] = v
	}
	return insert(rel, vals...)
}

// record is a comparable summary of a routed record: nil Key/Value are "<nil>".
type record struct {
	Topic      string
	Key        string
	Value      string
	Headers    []string // "key=value"
	EventID    string
	DeadLetter bool
}

func summarize(t *testing.T, r Routed) record {
	t.Helper()
	if r.Record == nil {
		t.Fatal("Routed.Record is nil")
	}
	s := func(b []byte) string {
		if b == nil {
			return "<nil>"
		}
		return string(b)
	}
	out := record{
		Topic:      r.Record.Topic,
		Key:        s(r.Record.Key),
		Value:      s(r.Record.Value),
		EventID:    r.EventID,
		DeadLetter: r.DeadLetter,
	}
	for _, h := range r.Record.Headers {
		out.Headers = append(out.Headers, h.Key+"="+string(h.Value))
	}
	return out
}

func (r record) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "topic=%q key=%q value=%q event_id=%q dead_letter=%v headers:", r.Topic, r.Key, r.Value, r.EventID, r.DeadLetter)
	for _, h := range r.Headers {
		fmt.Fprintf(&b, "\n\t%q", h)
	}
	return b.String()
}

func assertRecord(t *testing.T, got Routed, want record) {
	t.Helper()
	g := summarize(t, got)
	if !reflect.DeepEqual(g, want) {
		t.Errorf("routed record mismatch\n got: %v\nwant: %v", g, want)
	}
}

func mustNew(t testing.TB, cfg Config) *Router {
	t.Helper()
	r, err := New(cfg)
	if err != nil {
		t.Fatalf("New(%+v): %v", cfg, err)
	}
	return r
}

// header returns the value of the last header named key, and whether any was.
func header(rec *kgo.Record, key string) (string, bool) {
	for i := len(rec.Headers) - 1; i >= 0; i-- {
		if rec.Headers[i].Key == key {
			return string(rec.Headers[i].Value), true
		}
	}
	return "", false
}
