package eventrouter

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

var (
	_ pipeline.Router       = (*Router)(nil)
	_ slotctl.ColumnChecker = (*Router)(nil)
)

// col is a column of a test relation: name, type OID and (for timestamps)
// the type modifier.
type col struct {
	name  string
	oid   uint32
	mod   int32
	key   bool
	value *string // nil is SQL NULL
}

func str(s string) *string { return &s }

// canonical is Debezium's documented outbox table, with a NOT NULL id as
// the replica identity.
func canonical(payload *string) []col {
	return []col{
		{name: "id", oid: oidUUID, key: true, value: str("9f1a2b3c-0000-4000-8000-000000000001")},
		{name: "aggregatetype", oid: oidVarchar, value: str("order")},
		{name: "aggregateid", oid: oidVarchar, value: str("42")},
		{name: "type", oid: oidVarchar, value: str("OrderCreated")},
		{name: "payload", oid: oidJSONB, value: payload},
	}
}

var testCommit = time.Date(2026, 12, 1, 1, 2, 3, 456789000, time.UTC)

func insert(cols []col) *decoder.Insert {
	rel := &decoder.Relation{ID: 16384, Namespace: "public", Name: "outbox"}
	ins := &decoder.Insert{XID: 7, LSN: 0x16B3748, CommitTime: testCommit, Relation: rel}
	for _, c := range cols {
		mod := c.mod
		if mod == 0 {
			mod = -1
		}
		rel.Columns = append(rel.Columns, decoder.Column{Name: c.name, TypeOID: c.oid, TypeModifier: mod, Key: c.key})
		if c.value == nil {
			ins.Values = append(ins.Values, decoder.Value{Kind: decoder.KindNull})
		} else {
			ins.Values = append(ins.Values, decoder.Value{Kind: decoder.KindText, Data: []byte(*c.value)})
		}
	}
	return ins
}

func testConfig(mod func(*Config)) Config {
	cfg := Defaults()
	cfg.LogicalName = "dbserver1"
	cfg.ConnectorName = "outbox-connector"
	cfg.RunID = "0197ad84-7a0d-7527-9f8a-a08602319b4d"
	if mod != nil {
		mod(&cfg)
	}
	return cfg
}

func ctxHeaders() []kgo.RecordHeader {
	return []kgo.RecordHeader{
		{Key: HeaderConnectorLogicalName, Value: []byte("dbserver1")},
		{Key: HeaderTaskID, Value: []byte("0")},
		{Key: HeaderConnectorName, Value: []byte("postgresql")},
		{Key: HeaderRunID, Value: []byte("0197ad84-7a0d-7527-9f8a-a08602319b4d")},
	}
}

func hdr(k, v string) kgo.RecordHeader { return kgo.RecordHeader{Key: k, Value: []byte(v)} }

const eventID = "9f1a2b3c-0000-4000-8000-000000000001"

func TestRoute(t *testing.T) {
	jsonStr := func(c ConverterConfig) func(*Config) {
		return func(cfg *Config) { cfg.KeyConverter, cfg.ValueConverter = c, c }
	}
	stringConv := ConverterConfig{Kind: StringConverter}
	jsonNoSchemas := ConverterConfig{Kind: JSONConverter}
	tests := []struct {
		name        string
		cfg         func(*Config)
		cols        []col
		wantTopic   string
		wantKey     string // "<nil>" for a null key
		wantValue   string // "<nil>" for a null value
		wantHeaders []kgo.RecordHeader
	}{
		{
			name:      "defaults: JsonConverter with schemas",
			cols:      canonical(str(`{"total": 10}`)),
			wantTopic: "outbox.event.order",
			wantKey:   `{"schema":{"type":"string","optional":true},"payload":"42"}`,
			wantValue: `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{\"total\": 10}"}`,
		},
		{
			name:      "JsonConverter without schemas",
			cfg:       jsonStr(jsonNoSchemas),
			cols:      canonical(str(`{"total": 10}`)),
			wantTopic: "outbox.event.order",
			wantKey:   `"42"`,
			wantValue: `"{\"total\": 10}"`,
		},
		{
			name:      "StringConverter",
			cfg:       jsonStr(stringConv),
			cols:      canonical(str(`{"total": 10}`)),
			wantTopic: "outbox.event.order",
			wantKey:   `42`,
			wantValue: `{"total": 10}`,
		},
		{
			name:      "NULL payload without tombstone: a null under the payload schema",
			cols:      canonical(nil),
			wantTopic: "outbox.event.order",
			wantKey:   `{"schema":{"type":"string","optional":true},"payload":"42"}`,
			wantValue: `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":null}`,
		},
		{
			name:      "NULL payload without tombstone, no schemas",
			cfg:       jsonStr(jsonNoSchemas),
			cols:      canonical(nil),
			wantTopic: "outbox.event.order",
			wantKey:   `"42"`,
			wantValue: `null`,
		},
		{
			name:      "NULL payload with tombstone",
			cfg:       func(c *Config) { c.TombstoneOnEmptyPayload = true },
			cols:      canonical(nil),
			wantTopic: "outbox.event.order",
			wantKey:   `{"schema":{"type":"string","optional":true},"payload":"42"}`,
			wantValue: "<nil>",
		},
		{
			name:      "route by value with a custom replacement",
			cfg:       func(c *Config) { c.TopicReplacement = "${routedByValue}.events" },
			cols:      canonical(str(`{}`)),
			wantTopic: "order.events",
			wantKey:   `{"schema":{"type":"string","optional":true},"payload":"42"}`,
			wantValue: `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"{}"}`,
		},
		{
			name: "header and envelope placements with aliases",
			cfg: func(c *Config) {
				c.AdditionalPlacement = []Placement{
					{Column: "type", Location: "header", Alias: "eventType"},
					{Column: "type", Location: "envelope", Alias: "eventType"},
					{Column: "aggregateid", Location: "envelope"},
				}
			},
			cols:      canonical(str(`{"a":1}`)),
			wantTopic: "outbox.event.order",
			wantKey:   `{"schema":{"type":"string","optional":true},"payload":"42"}`,
			wantValue: `{"schema":{"type":"struct","fields":[` +
				`{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"field":"payload"},` +
				`{"type":"string","optional":true,"field":"eventType"},` +
				`{"type":"string","optional":true,"field":"aggregateid"}],` +
				`"optional":false,"name":"dbserver1.public.outbox.order.Value"},` +
				`"payload":{"payload":"{\"a\":1}","eventType":"OrderCreated","aggregateid":"42"}}`,
			wantHeaders: []kgo.RecordHeader{hdr("eventType", "OrderCreated")},
		},
		{
			name:      "expanded JSON payload",
			cfg:       func(c *Config) { c.ExpandJSONPayload = true },
			cols:      canonical(str(`{"id": 1, "big": 3000000000, "price": 1.5, "tags": ["a"], "n": null, "o": {"x": true}}`)),
			wantTopic: "outbox.event.order",
			wantKey:   `{"schema":{"type":"string","optional":true},"payload":"42"}`,
			wantValue: `{"schema":{"type":"struct","fields":[` +
				`{"type":"int32","optional":true,"field":"id"},` +
				`{"type":"int64","optional":true,"field":"big"},` +
				`{"type":"double","optional":true,"field":"price"},` +
				`{"type":"array","items":{"type":"string","optional":true},"optional":true,"field":"tags"},` +
				`{"type":"struct","fields":[{"type":"boolean","optional":true,"field":"x"}],"optional":true,"name":"payload.o","field":"o"}],` +
				`"optional":true,"name":"payload"},` +
				`"payload":{"id":1,"big":3000000000,"price":1.5,"tags":["a"],"o":{"x":true}}}`,
		},
		{
			name: "expanded JSON payload, nulls as optional bytes, no schemas",
			cfg: func(c *Config) {
				c.ExpandJSONPayload = true
				c.JSONPayloadNullBehavior = "optional_bytes"
				c.ValueConverter = jsonNoSchemas
			},
			cols:      canonical(str(`{"n": null, "s": "x"}`)),
			wantTopic: "outbox.event.order",
			wantKey:   `{"schema":{"type":"string","optional":true},"payload":"42"}`,
			wantValue: `{"n":null,"s":"x"}`,
		},
		{
			name:      "expanded JSON payload that is not an object stays a string",
			cfg:       func(c *Config) { c.ExpandJSONPayload = true; c.ValueConverter = jsonNoSchemas },
			cols:      canonical(str(`"just a string"`)),
			wantTopic: "outbox.event.order",
			wantKey:   `{"schema":{"type":"string","optional":true},"payload":"42"}`,
			wantValue: `"\"just a string\""`,
		},
		{
			name: "NULL key",
			cfg:  jsonStr(stringConv),
			cols: func() []col {
				c := canonical(str("x"))
				c[2].value = nil
				return c
			}(),
			wantTopic: "outbox.event.order",
			wantKey:   "<nil>",
			wantValue: "x",
		},
		{
			name: "NOT NULL columns from the catalog",
			cfg: func(c *Config) {
				c.Columns = map[string][]ColumnInfo{"public.outbox": {
					{Name: "id", NotNull: true}, {Name: "aggregatetype", NotNull: true},
					{Name: "aggregateid", NotNull: true}, {Name: "type", NotNull: true}, {Name: "payload"},
				}}
			},
			cols:      canonical(str(`1`)),
			wantTopic: "outbox.event.order",
			wantKey:   `{"schema":{"type":"string","optional":false},"payload":"42"}`,
			wantValue: `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1},"payload":"1"}`,
		},
		{
			name: "text payload and a uuid key through the regex's numbered group",
			cfg: func(c *Config) {
				c.EventKeyColumn = "id"
				c.TopicRegex = "(ord)(er)"
				c.TopicReplacement = `x.$2\_.$1`
				c.ValueConverter = stringConv
			},
			cols: func() []col {
				c := canonical(nil)
				c[4] = col{name: "payload", oid: oidText, value: str("hello\n")}
				return c
			}(),
			wantTopic: "x.er_.ord",
			wantKey:   `{"schema":{"type":"string","optional":false,"name":"io.debezium.data.Uuid","version":1},"payload":"` + eventID + `"}`,
			wantValue: "hello\n",
		},
		{
			name:      "extended headers off",
			cfg:       func(c *Config) { c.ExtendedHeaders = false; c.ValueConverter = stringConv; c.KeyConverter = stringConv },
			cols:      canonical(str("p")),
			wantTopic: "outbox.event.order",
			wantKey:   "42",
			wantValue: "p",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig(tt.cfg)
			r, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			now := time.Date(2026, 12, 1, 2, 0, 0, 123456789, time.UTC)
			r.now = func() time.Time { return now }
			got, err := r.Route(insert(tt.cols))
			if err != nil {
				t.Fatal(err)
			}
			rec := got.Record
			if rec.Topic != tt.wantTopic {
				t.Errorf("topic %q, want %q", rec.Topic, tt.wantTopic)
			}
			if s := show(rec.Key); s != tt.wantKey {
				t.Errorf("key\n got %s\nwant %s", s, tt.wantKey)
			}
			if s := show(rec.Value); s != tt.wantValue {
				t.Errorf("value\n got %s\nwant %s", s, tt.wantValue)
			}
			var want []kgo.RecordHeader
			if cfg.ExtendedHeaders {
				want = ctxHeaders()
			}
			id := tt.cols[0].value
			want = append(want, kgo.RecordHeader{Key: "id", Value: []byte(*id)})
			want = append(want, tt.wantHeaders...)
			if showHeaders(rec.Headers) != showHeaders(want) {
				t.Errorf("headers\n got %s\nwant %s", showHeaders(rec.Headers), showHeaders(want))
			}
			if !rec.Timestamp.Equal(now.Truncate(time.Millisecond)) {
				t.Errorf("timestamp %v, want the processing time %v", rec.Timestamp, now.Truncate(time.Millisecond))
			}
			if got.EventID != *id {
				t.Errorf("EventID %q, want %q", got.EventID, *id)
			}
		})
	}
}

func show(b []byte) string {
	if b == nil {
		return "<nil>"
	}
	return string(b)
}

func showHeaders(hs []kgo.RecordHeader) string {
	var b strings.Builder
	for _, h := range hs {
		b.WriteString(h.Key + "=" + show(h.Value) + "; ")
	}
	return b.String()
}

func TestRouteTimestampColumn(t *testing.T) {
	tests := []struct {
		name    string
		mod     int32
		value   *string
		want    time.Time
		wantErr string
	}{
		{name: "timestamp(6)", value: str("2026-11-30 23:59:58.987654"), want: time.Date(2026, 11, 30, 23, 59, 58, 987000000, time.UTC)},
		{name: "timestamp(3)", mod: 3, value: str("2026-11-30 23:59:58.987"), want: time.Date(2026, 11, 30, 23, 59, 58, 987000000, time.UTC)},
		{name: "NULL falls back to processing time", value: nil, want: time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(testConfig(func(c *Config) { c.EventTimestampColumn = "created_at" }))
			if err != nil {
				t.Fatal(err)
			}
			r.now = func() time.Time { return time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC) }
			cols := append(canonical(str("{}")), col{name: "created_at", oid: oidTimestamp, mod: tt.mod, value: tt.value})
			got, err := r.Route(insert(cols))
			if err != nil {
				t.Fatal(err)
			}
			if !got.Record.Timestamp.Equal(tt.want) {
				t.Errorf("timestamp %v, want %v", got.Record.Timestamp, tt.want)
			}
		})
	}
}

func TestRouteInvalid(t *testing.T) {
	tests := []struct {
		name       string
		cfg        func(*Config)
		cols       func([]col) []col
		wantColumn string
	}{
		{name: "no payload column", cols: func(c []col) []col { return c[:4] }, wantColumn: "payload"},
		{name: "NULL route-by value", cols: func(c []col) []col { c[1].value = nil; return c }, wantColumn: "aggregatetype"},
		{name: "route-by value makes an invalid topic", cols: func(c []col) []col { c[1].value = str("a b"); return c }, wantColumn: "aggregatetype"},
		{name: "no key column", cfg: func(c *Config) { c.EventKeyColumn = "nope" }, wantColumn: "nope"},
		{
			name: "timestamptz event timestamp",
			cfg:  func(c *Config) { c.EventTimestampColumn = "ts" },
			cols: func(c []col) []col {
				return append(c, col{name: "ts", oid: oidTimestamptz, value: str("2026-12-01 00:00:00+00")})
			},
			wantColumn: "ts",
		},
		{
			name:       "ByteArrayConverter on a jsonb payload",
			cfg:        func(c *Config) { c.ValueConverter = ConverterConfig{Kind: ByteArrayConverter} },
			wantColumn: "payload",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(testConfig(tt.cfg))
			if err != nil {
				t.Fatal(err)
			}
			cols := canonical(str("{}"))
			if tt.cols != nil {
				cols = tt.cols(cols)
			}
			_, err = r.Route(insert(cols))
			var ire *router.InvalidRowError
			if !errors.As(err, &ire) || !errors.Is(err, router.ErrInvalidRow) {
				t.Fatalf("err %v, want an *router.InvalidRowError", err)
			}
			if ire.Column != tt.wantColumn {
				t.Errorf("column %q, want %q (%v)", ire.Column, tt.wantColumn, err)
			}

			// With a dead-letter topic the row becomes a record there.
			cfg := testConfig(tt.cfg)
			cfg.DeadLetterTopic = "outbox.dlq"
			r, err = New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got, err := r.Route(insert(cols))
			if err != nil {
				t.Fatal(err)
			}
			if !got.DeadLetter || got.Record.Topic != "outbox.dlq" || got.Reason == "" {
				t.Errorf("got %+v, want a dead-letter record for outbox.dlq", got)
			}
		})
	}
}

func TestNewRejects(t *testing.T) {
	tests := []struct {
		name string
		cfg  func(*Config)
		want string
	}{
		{"partition placement", func(c *Config) { c.AdditionalPlacement = []Placement{{Column: "p", Location: "partition"}} }, "partition"},
		{"unknown placement", func(c *Config) { c.AdditionalPlacement = []Placement{{Column: "p", Location: "body"}} }, "body"},
		{"bad regex", func(c *Config) { c.TopicRegex = "(?=x)" }, "route.topic.regex"},
		{"unknown group", func(c *Config) { c.TopicReplacement = "${nope}" }, "nope"},
		{"empty payload column", func(c *Config) { c.PayloadColumn = "" }, "table.field.event.payload"},
		{"null behaviour", func(c *Config) { c.JSONPayloadNullBehavior = "drop" }, "table.json.payload.null.behavior"},
		{"no topic prefix", func(c *Config) { c.LogicalName = "" }, "topic.prefix"},
		{"unknown converter", func(c *Config) { c.KeyConverter.Kind = "avro" }, "avro"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(testConfig(tt.cfg))
			if !errors.Is(err, router.ErrInvalidConfig) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want ErrInvalidConfig mentioning %q", err, tt.want)
			}
		})
	}
}

func TestCheckColumns(t *testing.T) {
	r, err := New(testConfig(func(c *Config) {
		c.AdditionalPlacement = []Placement{{Column: "type", Location: "header"}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckColumns("public.outbox", []string{"id", "aggregatetype", "aggregateid", "type", "payload"}); err != nil {
		t.Fatal(err)
	}
	err = r.CheckColumns("public.outbox", []string{"id", "aggregatetype", "payload"})
	if !errors.Is(err, router.ErrInvalidConfig) ||
		!strings.Contains(err.Error(), `table.field.event.key names column "aggregateid"`) ||
		!strings.Contains(err.Error(), `table.fields.additional.placement names column "type"`) {
		t.Fatalf("err %v", err)
	}
}

func TestRunIDIsUUIDv7(t *testing.T) {
	id := newUUIDv7(time.UnixMilli(0x0197ad847a0d))
	if len(id) != 36 || !strings.HasPrefix(id, "0197ad84-7a0d-7") || !strings.ContainsAny(id[19:20], "89ab") {
		t.Fatalf("id %q is not a UUIDv7 for the time", id)
	}
}

// TestEnvelopeSchemaNameSticks reproduces Debezium's payload schema cache:
// the envelope value schema is built once per payload schema, named after
// the route-by value of the first row that needed it, and reused for later
// rows routed elsewhere. The cache lives as long as the Router, as
// Debezium's lives as long as its task: a restart (a new Router) names the
// schema after the first row it sees.
func TestEnvelopeSchemaNameSticks(t *testing.T) {
	cfg := testConfig(func(c *Config) {
		c.AdditionalPlacement = []Placement{{Column: "type", Location: "envelope"}}
		c.ValueConverter = ConverterConfig{Kind: JSONConverter, SchemasEnable: true}
	})
	route := func(r *Router, aggType string) string {
		cols := canonical(str("{}"))
		cols[1].value = str(aggType)
		got, err := r.Route(insert(cols))
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Schema struct{ Name string }
		}
		if err := json.Unmarshal(got.Record.Value, &v); err != nil {
			t.Fatal(err)
		}
		return v.Schema.Name
	}
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := route(r, "order"); got != "dbserver1.public.outbox.order.Value" {
		t.Fatalf("first row: schema %q", got)
	}
	if got := route(r, "shipment"); got != "dbserver1.public.outbox.order.Value" {
		t.Fatalf("second row: schema %q, want the first row's", got)
	}
	restarted, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := route(restarted, "shipment"); got != "dbserver1.public.outbox.shipment.Value" {
		t.Fatalf("after a restart: schema %q", got)
	}
}
