package eventrouter

import (
	"testing"
	"time"

	"github.com/walbox/walbox/decoder"
)

// TestColumnDefault follows PostgresDefaultValueConverter: function calls
// and CURRENT_* keywords become the type's placeholder, quoted literals
// their text, NULL defaults and types without a mapper no default.
func TestColumnDefault(t *testing.T) {
	tests := []struct {
		name string
		oid  uint32
		mod  int32
		expr string
		want any
	}{
		{"none", oidText, -1, "", nil},
		{"varchar literal", oidVarchar, -1, "'new'::character varying", "new"},
		{"text NULL", oidText, -1, "NULL::text", nil},
		{"text function", oidText, -1, "md5((random())::text)", ""},
		{"jsonb literal", oidJSONB, -1, "'{}'::jsonb", "{}"},
		{"jsonb function", oidJSONB, -1, "jsonb_build_object('a', 1)", "{}"},
		{"int literal", oidInt4, -1, "42", int32(42)},
		{"negative int", oidInt4, -1, "'-1'::integer", int32(-1)},
		{"serial", oidInt8, -1, "nextval('outbox_seq_seq'::regclass)", int64(0)},
		{"smallint", oidInt2, -1, "7", int16(7)},
		{"int NULL", oidInt4, -1, "NULL::integer", nil},
		{"bool", oidBool, -1, "true", true},
		{"uuid function", oidUUID, -1, "gen_random_uuid()", "00000000-0000-0000-0000-000000000000"},
		{"uuid literal", oidUUID, -1, "'9F1A2B3C-0000-4000-8000-000000000001'::uuid", "9f1a2b3c-0000-4000-8000-000000000001"},
		{"timestamp now()", oidTimestamp, -1, "now()", int64(0)},
		{"timestamp(3) CURRENT_TIMESTAMP", oidTimestamp, 3, "CURRENT_TIMESTAMP", int64(0)},
		{"timestamp literal", oidTimestamp, -1, "'2020-01-02 03:04:05.5'::timestamp without time zone",
			time.Date(2020, 1, 2, 3, 4, 5, 5e8, time.UTC).UnixMicro()},
		{"timestamptz now()", oidTimestamptz, -1, "now()", "1970-01-01T00:00:00.000000Z"},
		{"bytea has no mapper", oidBytea, -1, "'\\x00'::bytea", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &decoder.Column{Name: "c", TypeOID: tt.oid, TypeModifier: tt.mod}
			s, err := columnSchema(c, true)
			if err != nil {
				t.Fatal(err)
			}
			if got := columnDefault(c, s, tt.expr); got != tt.want {
				t.Fatalf("default of %q = %#v, want %#v", tt.expr, got, tt.want)
			}
		})
	}
}

// TestRouteDefaults: a NULL reads as the column's default everywhere
// Debezium reads the row (Struct.get), and JsonConverter writes the default
// into the schema.
func TestRouteDefaults(t *testing.T) {
	r, err := New(testConfig(func(c *Config) {
		c.TombstoneOnEmptyPayload = true
		c.AdditionalPlacement = []Placement{{Column: "n", Location: "header"}}
		c.Columns = map[string][]ColumnInfo{"public.outbox": {
			{Name: "id", NotNull: true}, {Name: "aggregatetype", NotNull: true},
			{Name: "aggregateid", NotNull: true, Default: "'none'::character varying"},
			{Name: "type"}, {Name: "payload", Default: "'{}'::jsonb"}, {Name: "n", Default: "42"},
		}}
	}))
	if err != nil {
		t.Fatal(err)
	}
	cols := append(canonical(nil), col{name: "n", oid: oidInt4})
	got, err := r.Route(insert(cols))
	if err != nil {
		t.Fatal(err)
	}
	rec := got.Record
	if want := `{"schema":{"type":"string","optional":true,"name":"io.debezium.data.Json","version":1,"default":"{}"},"payload":"{}"}`; string(rec.Value) != want {
		t.Errorf("value %s, want %s (the default, and no tombstone)", rec.Value, want)
	}
	if want := `{"schema":{"type":"string","optional":false,"default":"none"},"payload":"42"}`; string(rec.Key) != want {
		t.Errorf("key %s, want %s", rec.Key, want)
	}
	if h := rec.Headers[len(rec.Headers)-1]; h.Key != "n" || string(h.Value) != "42" {
		t.Errorf("last header %s=%q, want n=42", h.Key, h.Value)
	}
}
