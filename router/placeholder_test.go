package router

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/walbox/walbox/decoder"
)

// debeziumRel is Debezium's default outbox table.
func debeziumRel() *decoder.Relation {
	return relation(16400, "outbox",
		col("id", decoder.UUIDOID), col("aggregatetype", decoder.VarcharOID), col("aggregateid", decoder.VarcharOID),
		col("type", decoder.VarcharOID), col("payload", decoder.JSONBOID))
}

// debeziumColumns is the README's mapping for Debezium's table.
var debeziumColumns = Columns{AggregateType: "aggregatetype", AggregateID: "aggregateid", EventType: "type"}

// TestLogicalPlaceholders: placeholders name the logical fields, so a column
// mapping alone is enough for the default template.
//
// Regression (issue 7, drift c): walbox passes the default template
// "outbox.event.{aggregate_type}" explicitly, and {aggregate_type} used to
// name the physical column, which Debezium's table does not have: with the
// README's mapping walbox exited 1 at start (CheckColumns) and every row
// failed with "table public.outbox has no column aggregate_type".
func TestLogicalPlaceholders(t *testing.T) {
	dbz := insert(debeziumRel(), txt("5f0c"), txt("Order"), txt("o-5"), txt("OrderShipped"), txt(`{"a":1}`))
	// Both a column literally named aggregate_type and the mapped one.
	bothRel := relation(16401, "outbox",
		col("aggregate_type", decoder.TextOID), col("kind", decoder.TextOID), col("aggregate_id", decoder.TextOID),
		col("payload", decoder.JSONBOID), col("tenant", decoder.TextOID), col("meta", decoder.JSONBOID))
	both := insert(bothRel, txt("physical"), txt("logical"), txt("a-1"), txt(`{}`), txt("acme"), txt(`{"region":"eu"}`))

	tests := []struct {
		name      string
		cfg       Config
		ins       *decoder.Insert
		wantTopic string
	}{
		{name: "default template given explicitly follows the mapping", ins: dbz, wantTopic: "outbox.event.Order",
			cfg: Config{Columns: debeziumColumns, TopicTemplate: DefaultTopicTemplate}},
		{name: "zero template follows the mapping", ins: dbz, wantTopic: "outbox.event.Order",
			cfg: Config{Columns: debeziumColumns}},
		{name: "every logical field", ins: dbz, wantTopic: "Order.o-5.OrderShipped.5f0c",
			cfg: Config{Columns: debeziumColumns, TopicTemplate: "{aggregate_type}.{aggregate_id}.{event_type}.{id}"}},
		{name: "logical wins over a column of the same name", ins: both, wantTopic: "outbox.event.logical",
			cfg: Config{Columns: Columns{AggregateType: "kind"}, TopicTemplate: DefaultTopicTemplate}},
		{name: "physical columns stay addressable", ins: both, wantTopic: "t.acme.eu",
			cfg: Config{Columns: Columns{AggregateType: "kind"}, TopicTemplate: "t.{tenant}.{meta->>region}"}},
		{name: "a logical field mapped to a JSON key", ins: both, wantTopic: "t.eu",
			cfg: Config{Columns: Columns{AggregateType: "meta->>region"}, TopicTemplate: "t.{aggregate_type}"}},
		{name: "the unmapped topic field is the column named topic",
			ins:       insert(relation(16402, "outbox", col("topic", decoder.TextOID), col("aggregate_id", decoder.TextOID), col("payload", decoder.JSONBOID)), txt("dest"), txt("a"), txt("{}")),
			wantTopic: "x.dest", cfg: Config{TopicTemplate: "x.{topic}"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.cfg)
			cols := make([]string, len(tt.ins.Relation.Columns))
			for i, c := range tt.ins.Relation.Columns {
				cols[i] = c.Name
			}
			if err := r.CheckColumns("public.outbox", cols); err != nil {
				t.Errorf("CheckColumns: %v", err)
			}
			got, err := r.Route(tt.ins)
			if err != nil {
				t.Fatalf("Route: %v", err)
			}
			if got.Record.Topic != tt.wantTopic {
				t.Errorf("topic %q, want %q", got.Record.Topic, tt.wantTopic)
			}
		})
	}
}

// TestCheckColumnsNamesTheMapping: a missing mapped column is reported with
// the placeholder and the option that maps it.
func TestCheckColumnsNamesTheMapping(t *testing.T) {
	r := mustNew(t, Config{Columns: Columns{AggregateType: "aggtype"}, TopicTemplate: DefaultTopicTemplate})
	err := r.CheckColumns("public.outbox", []string{"aggregate_type", "aggregate_id", "payload"})
	if err == nil {
		t.Fatal("CheckColumns accepted a table without the mapped column")
	}
	for _, want := range []string{"{aggregate_type}", "--column-aggregate-type (columns.aggregate_type)", `names column "aggtype"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestConfigErrorFields: Validate reports every problem, each a
// *ConfigError that names its field, so walbox can map it to its flag.
func TestConfigErrorFields(t *testing.T) {
	cfg := Config{
		Columns:         Columns{Payload: "data->>body", AggregateID: `"Agg"`},
		TopicTemplate:   "x.{",
		DeadLetterTopic: "dlq",
	}
	err := cfg.Validate()
	var got []Field
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var ce *ConfigError
		if !errors.As(e, &ce) || !errors.Is(e, ErrInvalidConfig) {
			t.Fatalf("%v is not a *ConfigError wrapping ErrInvalidConfig", e)
		}
		got = append(got, ce.Field)
	}
	want := []Field{FieldDeadLetterTopic, FieldColumnsAggregateID, FieldColumnsPayload, FieldTopicTemplate}
	if !slices.Equal(got, want) {
		t.Errorf("fields %v, want %v\n%v", got, want, err)
	}

	var ce *ConfigError
	errors.As(Config{DeadLetterTopic: "dlq"}.Validate(), &ce)
	name := func(f Field) string { return "--" + strings.ToLower(string(f)) }
	if got, want := ce.Reason(name), `set, but --invalidrows is "fail", under which invalid rows stop walbox, so it would never be used; set --invalidrows to "dead-letter" or remove it`; got != want {
		t.Errorf("Reason(name) = %q\nwant %q", got, want)
	}
	errors.As(Config{InvalidRows: PolicyDeadLetter}.Validate(), &ce)
	if !ce.Missing || ce.Field != FieldDeadLetterTopic {
		t.Errorf("dead-letter without a topic: %+v, want a missing DeadLetterTopic", ce)
	}
}

// TestBindingCacheBounded: a writer adding tables (each a new relation OID)
// does not grow the binding cache without limit, and an evicted relation is
// bound again when it comes back.
func TestBindingCacheBounded(t *testing.T) {
	r := mustNew(t, Config{})
	rels := make([]*decoder.Relation, 3*maxCachedRelations)
	for i := range rels {
		rels[i] = classicRel()
		rels[i].ID = uint32(20000 + i)
		if _, err := r.Route(classicRow(rels[i], nil)); err != nil {
			t.Fatal(err)
		}
	}
	if n := r.binds.Len(); n > maxCachedRelations {
		t.Fatalf("binding cache holds %d relations, want at most %d", n, maxCachedRelations)
	}
	// The first relations were evicted; routing them again still works.
	got, err := r.Route(classicRow(rels[0], nil))
	if err != nil || got.Record.Topic != "outbox.event.order" {
		t.Fatalf("Route after eviction = %+v, %v", got.Record, err)
	}
}

// TestMalformedMappedColumnReportedOnce: a bad mapping is one problem, on
// its Columns field, not a second one on the template that uses it.
func TestMalformedMappedColumnReportedOnce(t *testing.T) {
	err := Config{Columns: Columns{AggregateType: `"Type"`}, TopicTemplate: DefaultTopicTemplate}.Validate()
	var ce *ConfigError
	if !errors.As(err, &ce) || ce.Field != FieldColumnsAggregateType || strings.Count(err.Error(), "router: ") != 1 {
		t.Errorf("Validate() = %v, want one problem on %s", err, FieldColumnsAggregateType)
	}
}
