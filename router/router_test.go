package router

import (
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/walbox/walbox/decoder"
)

// TestRouteTableShapes routes one row of each outbox table shape in
// shared/context/outbox.md with the configuration its team would write.
func TestRouteTableShapes(t *testing.T) {
	minimal := relation(16400, "outbox",
		col("id", decoder.Int8OID),
		col("aggregate", decoder.TextOID),
		col("aggregate_id", decoder.TextOID),
		col("type", decoder.TextOID),
		col("payload", decoder.JSONBOID),
		col("headers", decoder.JSONBOID),
		col("created_at", decoder.TimestamptzOID),
		col("sent_at", decoder.TimestamptzOID),
	)
	minimalCfg := Config{Columns: Columns{AggregateType: "aggregate", EventType: "type"}}

	debezium := func(payloadOID uint32) *decoder.Relation {
		return relation(16410, "outbox",
			col("id", decoder.UUIDOID),
			col("aggregatetype", decoder.VarcharOID),
			col("aggregateid", decoder.VarcharOID),
			col("type", decoder.VarcharOID),
			col("payload", payloadOID),
		)
	}
	debeziumCfg := Config{Columns: Columns{AggregateType: "aggregatetype", AggregateID: "aggregateid", EventType: "type"}}
	const uuid = "5f0c6a58-3b1d-4a8e-9c39-0d7f2a1e4b11"

	eventSourced := relation(16420, "outbox",
		col("event_id", decoder.UUIDOID),
		col("topic", decoder.TextOID),
		col("partition_key", decoder.TextOID),
		col("payload", decoder.JSONBOID),
		col("headers", decoder.JSONBOID),
	)
	eventSourcedCfg := Config{Columns: Columns{ID: "event_id", AggregateID: "partition_key", Topic: "topic"}}

	const xid8OID = 5069
	watermill := relation(16430, "watermill_orders",
		col("offset_acked", decoder.Int8OID),
		col("offset_consumed", decoder.Int8OID),
		col("uuid", decoder.VarcharOID),
		col("created_at", decoder.TimestamptzOID),
		col("payload", decoder.JSONOID),
		col("metadata", decoder.JSONOID),
		col("transaction_id", xid8OID),
	)
	watermillCfg := Config{
		Columns: Columns{
			ID:          "uuid",
			AggregateID: "metadata->>Aggregate-Id",
			EventType:   "metadata->>Event-Type",
			Headers:     "metadata",
		},
		TopicTemplate: "wm.{metadata->>Source-Service}.{metadata->>Event-Type}",
	}
	// json (not jsonb) keeps the document exactly as written.
	const watermillMeta = `{"Event-Type":"OrderPlaced","Schema-Version":2,"Correlation-Id":"c-7",` +
		`"Source-Service":"orders","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","Aggregate-Id":"o-9"}`

	tests := []struct {
		name string
		cfg  Config
		ins  *decoder.Insert
		want record
	}{
		{
			name: "classic",
			cfg:  Config{},
			ins:  classicRow(classicRel(), nil),
			want: record{
				Topic: "outbox.event.order", Key: "o-1", Value: `{"total": 12.5}`, EventID: "42",
				Headers: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
			},
		},
		{
			name: "classic with NULL headers has no row headers",
			cfg:  Config{},
			ins:  classicRow(classicRel(), map[string]decoder.Value{"headers": null}),
			want: record{
				Topic: "outbox.event.order", Key: "o-1", Value: `{"total": 12.5}`, EventID: "42",
				Headers: []string{"event_id=42", "event_type=OrderCreated"},
			},
		},
		{
			name: "classic with NULL id and event type: no event_id, no event_type",
			cfg:  Config{},
			ins:  classicRow(classicRel(), map[string]decoder.Value{"id": null, "event_type": null}),
			want: record{
				Topic: "outbox.event.order", Key: "o-1", Value: `{"total": 12.5}`,
				Headers: []string{"correlation_id=c-1", "trace_id=t-9"},
			},
		},
		{
			name: "minimal with traceparent and idempotency key",
			cfg:  minimalCfg,
			ins: insert(minimal, txt("7"), txt("customer"), txt("c-3"), txt("CustomerRenamed"),
				txt(`{"name": "Ada"}`),
				txt(`{"traceparent": "00-abc-def-01", "idempotency_key": "k-1"}`),
				txt("2025-01-02 03:04:05+00"), null),
			want: record{
				Topic: "outbox.event.customer", Key: "c-3", Value: `{"name": "Ada"}`, EventID: "7",
				Headers: []string{"event_id=7", "event_type=CustomerRenamed", "traceparent=00-abc-def-01", "idempotency_key=k-1"},
			},
		},
		{
			name: "minimal with the default empty headers object",
			cfg:  minimalCfg,
			ins: insert(minimal, txt("8"), txt("customer"), txt("c-3"), txt("CustomerDeleted"),
				txt(`{}`), txt(`{}`), txt("2025-01-02 03:04:05+00"), null),
			want: record{
				Topic: "outbox.event.customer", Key: "c-3", Value: `{}`, EventID: "8",
				Headers: []string{"event_id=8", "event_type=CustomerDeleted"},
			},
		},
		{
			name: "debezium with bytea payload in hex output",
			cfg:  debeziumCfg,
			ins: insert(debezium(decoder.ByteaOID), txt(uuid), txt("Order"), txt("o-5"), txt("OrderShipped"),
				txt(`\x7b226964223a317d`)),
			want: record{
				Topic: "outbox.event.Order", Key: "o-5", Value: `{"id":1}`, EventID: uuid,
				Headers: []string{"event_id=" + uuid, "event_type=OrderShipped"},
			},
		},
		{
			name: "debezium with bytea payload in escape output",
			cfg:  debeziumCfg,
			ins: insert(debezium(decoder.ByteaOID), txt(uuid), txt("Order"), txt("o-5"), txt("Blob"),
				txt(`\000\001ab\\`)),
			want: record{
				Topic: "outbox.event.Order", Key: "o-5", Value: "\x00\x01ab\\", EventID: uuid,
				Headers: []string{"event_id=" + uuid, "event_type=Blob"},
			},
		},
		{
			name: "debezium with jsonb payload",
			cfg:  debeziumCfg,
			ins: insert(debezium(decoder.JSONBOID), txt(uuid), txt("Order"), txt("o-5"), txt("OrderShipped"),
				txt(`{"id": 1}`)),
			want: record{
				Topic: "outbox.event.Order", Key: "o-5", Value: `{"id": 1}`, EventID: uuid,
				Headers: []string{"event_id=" + uuid, "event_type=OrderShipped"},
			},
		},
		{
			name: "binary payload value passes through untouched, even for bytea",
			cfg:  debeziumCfg,
			ins: insert(debezium(decoder.ByteaOID), txt(uuid), txt("Order"), txt("o-5"), txt("Blob"),
				bin([]byte{0, 0xff, '\\', 'x'})),
			want: record{
				Topic: "outbox.event.Order", Key: "o-5", Value: "\x00\xff\\x", EventID: uuid,
				Headers: []string{"event_id=" + uuid, "event_type=Blob"},
			},
		},
		{
			name: "event-sourced with a topic column and partition key",
			cfg:  eventSourcedCfg,
			ins: insert(eventSourced, txt(uuid), txt("bank.accounts.v2"), txt("acct-17"),
				txt(`{"amount": 100}`), txt(`{"causation_id": "cmd-3"}`)),
			want: record{
				Topic: "bank.accounts.v2", Key: "acct-17", Value: `{"amount": 100}`, EventID: uuid,
				Headers: []string{"event_id=" + uuid, "causation_id=cmd-3"},
			},
		},
		{
			name: "watermill-sql with metadata",
			cfg:  watermillCfg,
			ins: insert(watermill, null, txt("1001"), txt(uuid), txt("2025-01-02 03:04:05+00"),
				txt(`{"order_id":"o-9"}`), txt(watermillMeta), txt("771")),
			want: record{
				Topic: "wm.orders.OrderPlaced", Key: "o-9", Value: `{"order_id":"o-9"}`, EventID: uuid,
				Headers: []string{
					"event_id=" + uuid, "event_type=OrderPlaced",
					"Event-Type=OrderPlaced", "Schema-Version=2", "Correlation-Id=c-7", "Source-Service=orders",
					"traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "Aggregate-Id=o-9",
				},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, tt.cfg)
			got, err := r.Route(tt.ins)
			if err != nil {
				t.Fatalf("Route: %v", err)
			}
			assertRecord(t, got, tt.want)
			if got.Reason != "" {
				t.Errorf("Reason = %q for a valid row", got.Reason)
			}
		})
	}
}

// TestRouteHeaderValues covers how row headers become Kafka headers: strings
// unescaped, everything else as compact JSON text, document order kept.
func TestRouteHeaderValues(t *testing.T) {
	tests := []struct {
		name    string
		oid     uint32
		headers decoder.Value
		want    []string
	}{
		{
			name:    "scalars",
			oid:     decoder.JSONBOID,
			headers: txt(`{"s": "x", "n": 1.50, "neg": -3e2, "t": true, "f": false, "z": null, "empty": ""}`),
			want:    []string{"s=x", "n=1.50", "neg=-3e2", "t=true", "f=false", "z=null", "empty="},
		},
		{
			name:    "containers compacted from jsonb's spaced rendering",
			oid:     decoder.JSONBOID,
			headers: txt(`{"o": {"a": [1, 2], "b": {}}, "a": [1, "b c", {"c": null}], "e": []}`),
			want:    []string{`o={"a":[1,2],"b":{}}`, `a=[1,"b c",{"c":null}]`, "e=[]"},
		},
		{
			name:    "json keeps writer whitespace outside strings out of values",
			oid:     decoder.JSONOID,
			headers: txt("\n  {\n\t\"o\" :\t{ \"k\" : \"}\\\"] x\" } ,\"n\":1 }\n"),
			want:    []string{`o={"k":"}\"] x"}`, "n=1"},
		},
		{
			name:    "escapes resolved in keys and string values",
			oid:     decoder.JSONBOID,
			headers: txt(`{"esc": "line\nbreak \u00e9 \"q\"", "e\"k": "v", "sl\/": "a\/b"}`),
			want:    []string{"esc=line\nbreak é \"q\"", `e"k=v`, "sl/=a/b"},
		},
		{
			name:    "non-ASCII as jsonb renders it",
			oid:     decoder.JSONBOID,
			headers: txt(`{"ключ": "значение"}`),
			want:    []string{"ключ=значение"},
		},
		{
			name:    "duplicate keys of a json column all kept, in order",
			oid:     decoder.JSONOID,
			headers: txt(`{"dup": 1, "x": 0, "dup": 2}`),
			want:    []string{"dup=1", "x=0", "dup=2"},
		},
		{
			name:    "binary jsonb loses its version byte",
			oid:     decoder.JSONBOID,
			headers: bin(append([]byte{1}, `{"k": "v"}`...)),
			want:    []string{"k=v"},
		},
		{
			name:    "more headers than fit inline",
			oid:     decoder.JSONBOID,
			headers: txt(`{"a": "1", "b": "2", "c": "3", "d": "4", "e": "5"}`),
			want:    []string{"a=1", "b=2", "c=3", "d=4", "e=5"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rel := classicRel()
			rel.Columns[rel.ColumnIndex("headers")].TypeOID = tt.oid
			r := mustNew(t, Config{})
			got, err := r.Route(classicRow(rel, map[string]decoder.Value{"headers": tt.headers}))
			if err != nil {
				t.Fatalf("Route: %v", err)
			}
			want := record{
				Topic: "outbox.event.order", Key: "o-1", Value: `{"total": 12.5}`, EventID: "42",
				Headers: append([]string{"event_id=42", "event_type=OrderCreated"}, tt.want...),
			}
			assertRecord(t, got, want)
		})
	}
}

// TestRouteTopicTemplates covers template rendering beyond the default.
func TestRouteTopicTemplates(t *testing.T) {
	tests := []struct {
		name     string
		template string
		override map[string]decoder.Value
		want     string
	}{
		{name: "default", template: "", want: "outbox.event.order"},
		{name: "constant", template: "all-events", want: "all-events"},
		{name: "placeholder first and last", template: "{aggregate_type}.{event_type}", want: "order.OrderCreated"},
		{name: "adjacent placeholders", template: "{aggregate_type}{aggregate_id}", want: "ordero-1"},
		{name: "json key of the headers column", template: "t.{headers->>trace_id}", want: "t.t-9"},
		{
			name:     "number read with ->> renders as its JSON text",
			template: "v{headers->>version}",
			override: map[string]decoder.Value{"headers": txt(`{"version": 3}`)},
			want:     "v3",
		},
		{
			name:     "->> matches an escaped key",
			template: "t.{headers->>correlation_id}",
			override: map[string]decoder.Value{"headers": txt(`{"correlation\u005fid": "x"}`)},
			want:     "t.x",
		},
		{
			name:     "->> takes the last of duplicate keys, as Postgres does for json",
			template: "t.{headers->>k}",
			override: map[string]decoder.Value{"headers": txt(`{"k": "a", "k": "b"}`)},
			want:     "t.b",
		},
		{
			name:     "->> string value with escapes is unescaped",
			template: "t.{headers->>k}",
			override: map[string]decoder.Value{"headers": txt(`{"k": "a\u002db"}`)},
			want:     "t.a-b",
		},
		{
			name:     "249 characters is allowed",
			template: "{aggregate_type}",
			override: map[string]decoder.Value{"aggregate_type": txt(strings.Repeat("a", 249))},
			want:     strings.Repeat("a", 249),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustNew(t, Config{TopicTemplate: tt.template})
			got, err := r.Route(classicRow(classicRel(), tt.override))
			if err != nil {
				t.Fatalf("Route: %v", err)
			}
			if got.Record.Topic != tt.want {
				t.Errorf("topic = %q, want %q", got.Record.Topic, tt.want)
			}
		})
	}
}

// TestRouteRelationChange: Postgres re-announces a table after ALTER TABLE
// and the decoder hands out a new *Relation with the same ID. Indices
// resolved for the old definition would read the wrong columns.
func TestRouteRelationChange(t *testing.T) {
	r := mustNew(t, Config{})
	v1 := classicRel()
	first, err := r.Route(classicRow(v1, nil))
	if err != nil {
		t.Fatalf("Route v1: %v", err)
	}
	want := record{
		Topic: "outbox.event.order", Key: "o-1", Value: `{"total": 12.5}`, EventID: "42",
		Headers: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
	}
	assertRecord(t, first, want)

	// Same relation ID, columns reordered and one added in front.
	v2 := relation(v1.ID, "outbox",
		col("tenant", decoder.TextOID),
		col("payload", decoder.JSONBOID),
		col("headers", decoder.JSONBOID),
		col("event_type", decoder.TextOID),
		col("aggregate_id", decoder.TextOID),
		col("aggregate_type", decoder.TextOID),
		col("id", decoder.Int8OID),
	)
	second, err := r.Route(insert(v2, txt("acme"), txt(`{"total": 1}`), txt(`{"correlation_id": "c-2"}`),
		txt("OrderPaid"), txt("o-2"), txt("invoice"), txt("43")))
	if err != nil {
		t.Fatalf("Route v2: %v", err)
	}
	assertRecord(t, second, record{
		Topic: "outbox.event.invoice", Key: "o-2", Value: `{"total": 1}`, EventID: "43",
		Headers: []string{"event_id=43", "event_type=OrderPaid", "correlation_id=c-2"},
	})

	// Another table interleaved, then v2 again: both bindings stay correct.
	other := relation(v1.ID+1, "outbox_b",
		col("aggregate_id", decoder.TextOID), col("payload", decoder.JSONBOID), col("aggregate_type", decoder.TextOID))
	if got, err := r.Route(insert(other, txt("b-1"), txt(`1`), txt("bee"))); err != nil {
		t.Fatalf("Route other: %v", err)
	} else {
		assertRecord(t, got, record{Topic: "outbox.event.bee", Key: "b-1", Value: "1"})
	}
	if got, err := r.Route(insert(v2, txt("acme"), txt(`2`), null, null, txt("o-3"), txt("invoice"), txt("44"))); err != nil {
		t.Fatalf("Route v2 again: %v", err)
	} else {
		assertRecord(t, got, record{
			Topic: "outbox.event.invoice", Key: "o-3", Value: "2", EventID: "44", Headers: []string{"event_id=44"},
		})
	}

	// A third definition drops aggregate_id: the row is now invalid, not
	// routed with a stale index.
	v3 := relation(v1.ID, "outbox", col("aggregate_type", decoder.TextOID), col("payload", decoder.JSONBOID))
	if _, err := r.Route(insert(v3, txt("order"), txt("{}"))); err == nil || !strings.Contains(err.Error(), `has no column "aggregate_id"`) {
		t.Fatalf("Route v3: err = %v, want missing aggregate_id", err)
	}
}

// TestRouteInternsTopics: a steady stream to one topic reuses one string.
func TestRouteInternsTopics(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Columns: Columns{Topic: "aggregate_type"}},
	} {
		r := mustNew(t, cfg)
		rel := classicRel()
		a, errA := r.Route(classicRow(rel, nil))
		b, errB := r.Route(classicRow(rel, nil))
		if errA != nil || errB != nil {
			t.Fatalf("Route: %v, %v", errA, errB)
		}
		if unsafe.StringData(a.Record.Topic) != unsafe.StringData(b.Record.Topic) {
			t.Errorf("config %+v: topic %q allocated twice", cfg, a.Record.Topic)
		}
	}
}

// TestRouteInternCacheBounded: a writer bug producing a new topic per row
// must not grow the cache without limit.
func TestRouteInternCacheBounded(t *testing.T) {
	r := mustNew(t, Config{})
	rel := classicRel()
	for i := range maxCachedTopics + 10 {
		ins := classicRow(rel, map[string]decoder.Value{"aggregate_type": txt("t" + strconv.Itoa(i))})
		if _, err := r.Route(ins); err != nil {
			t.Fatalf("row %d: %v", i, err)
		}
	}
	if n := len(r.topics); n > maxCachedTopics {
		t.Errorf("topic cache holds %d entries, bound is %d", n, maxCachedTopics)
	}
}

// TestRouteAllocations guards the per-event allocation budget of a classic
// row: the record (sharing its allocation with the headers) and the EventID
// string.
func TestRouteAllocations(t *testing.T) {
	r := mustNew(t, Config{})
	ins := classicRow(classicRel(), nil)
	if _, err := r.Route(ins); err != nil {
		t.Fatal(err)
	}
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := r.Route(ins); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 2 {
		t.Errorf("Route allocates %.1f times per classic row, want at most 2", allocs)
	}
}

// TestRouteNotAnInsertBug: inputs only a caller bug produces are plain
// errors under either policy, never a dead letter.
func TestRouteNotAnInsertBug(t *testing.T) {
	rel := classicRel()
	tests := []struct {
		name    string
		ins     *decoder.Insert
		wantErr string
	}{
		{name: "nil insert", ins: nil, wantErr: "nil insert"},
		{name: "nil relation", ins: &decoder.Insert{}, wantErr: "nil insert or relation"},
		{name: "too few values", ins: insert(rel, txt("1")), wantErr: "has 1 values for 10 columns"},
	}
	for _, tt := range tests {
		for _, cfg := range []Config{{}, {InvalidRows: PolicyDeadLetter, DeadLetterTopic: "dlq"}} {
			t.Run(tt.name+"/"+string(cfg.InvalidRows), func(t *testing.T) {
				_, err := mustNew(t, cfg).Route(tt.ins)
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
			})
		}
	}
}

func BenchmarkRoute(b *testing.B) {
	benchmarks := []struct {
		name string
		cfg  Config
		ins  *decoder.Insert
	}{
		{name: "classic", cfg: Config{}, ins: classicRow(classicRel(), nil)},
		{
			name: "classic_topic_column",
			cfg:  Config{Columns: Columns{Topic: "aggregate_type"}},
			ins:  classicRow(classicRel(), nil),
		},
		{
			name: "debezium_bytea",
			cfg:  Config{Columns: Columns{AggregateType: "aggregatetype", AggregateID: "aggregateid", EventType: "type"}},
			ins: insert(relation(1, "outbox",
				col("id", decoder.UUIDOID), col("aggregatetype", decoder.VarcharOID), col("aggregateid", decoder.VarcharOID),
				col("type", decoder.VarcharOID), col("payload", decoder.ByteaOID)),
				txt("5f0c6a58-3b1d-4a8e-9c39-0d7f2a1e4b11"), txt("Order"), txt("o-5"), txt("OrderShipped"),
				txt(`\x`+strings.Repeat("7b226964223a317d", 32))),
		},
		{
			name: "watermill_metadata",
			cfg: Config{
				Columns: Columns{
					ID: "uuid", AggregateID: "metadata->>Aggregate-Id", EventType: "metadata->>Event-Type", Headers: "metadata",
				},
				TopicTemplate: "wm.{metadata->>Source-Service}.{metadata->>Event-Type}",
			},
			ins: insert(relation(2, "watermill_orders",
				col("uuid", decoder.VarcharOID), col("payload", decoder.JSONOID), col("metadata", decoder.JSONOID)),
				txt("5f0c6a58-3b1d-4a8e-9c39-0d7f2a1e4b11"), txt(`{"order_id":"o-9"}`),
				txt(`{"Event-Type":"OrderPlaced","Schema-Version":2,"Correlation-Id":"c-7",`+
					`"Source-Service":"orders","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","Aggregate-Id":"o-9"}`)),
		},
	}
	for _, bm := range benchmarks {
		b.Run(bm.name, func(b *testing.B) {
			r := mustNew(b, bm.cfg)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := r.Route(bm.ins); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
