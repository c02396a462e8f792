package eventrouter

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/walbox/walbox/decoder"
)

// TestTopicDelimiterNamesSchemas: Debezium's topic naming strategy joins
// topic.prefix, schema and table with topic.delimiter, and that name
// prefixes the record schemas: with an envelope placement, the value
// schema is "<prefix>_public_outbox.<route-by>.Value" for topic.delimiter=_.
// walbox used to join them with "." whatever the delimiter.
func TestTopicDelimiterNamesSchemas(t *testing.T) {
	cfg := testConfig(func(c *Config) {
		c.AdditionalPlacement = []Placement{{Column: "type", Location: "envelope"}}
		c.ValueConverter = ConverterConfig{Kind: JSONConverter, SchemasEnable: true}
		c.TopicDelimiter = "_"
	})
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got, err := r.Route(insert(canonical(str("{}"))))
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Schema struct{ Name string } }
	if err := json.Unmarshal(got.Record.Value, &v); err != nil {
		t.Fatal(err)
	}
	if want := "dbserver1_public_outbox.order.Value"; v.Schema.Name != want {
		t.Errorf("value schema %q, want %q", v.Schema.Name, want)
	}
}

// TestRecordSchemaPrefixSanitized: the name is a Kafka topic name, so
// Debezium replaces characters outside [A-Za-z0-9._-] (a "$" in a table
// name, a delimiter such as ":") with "_" and cuts it at 249 characters.
func TestRecordSchemaPrefixSanitized(t *testing.T) {
	for _, c := range []struct {
		delim, ns, table, want string
	}{
		{"", "public", "outbox", "p.public.outbox"},
		{".", "public", "out$box", "p.public.out_box"},
		{":", "public", "outbox", "p_public_outbox"},
		{"-", "sch", "é", "p-sch-_"},
		{".", "public", strings.Repeat("x", 300), ("p.public." + strings.Repeat("x", 300))[:249]},
	} {
		got := recordSchemaPrefix(Config{LogicalName: "p", TopicDelimiter: c.delim}, &decoder.Relation{Namespace: c.ns, Name: c.table})
		if got != c.want {
			t.Errorf("delimiter %q, %s.%s: %q, want %q", c.delim, c.ns, c.table, got, c.want)
		}
	}
}
