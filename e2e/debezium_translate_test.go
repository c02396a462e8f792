package e2e

import (
	"reflect"
	"sort"
	"testing"

	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/debezium/eventrouter"
	"github.com/walbox/walbox/internal/debeziumtest"
)

// TestDebeziumTranslationMatchesRecordsTest checks package debezium's
// translation against the configurations TestDebeziumRecordsMatch proves
// byte for byte against real Debezium: for every case, the connector
// properties Debezium ran with (debeziumtest's defaults with the case's
// merged over them) and debeziumtest's worker converters translate to the
// EventRouter configuration the records test gave walbox. It needs no Java.
func TestDebeziumTranslationMatchesRecordsTest(t *testing.T) {
	for _, c := range dbzCases() {
		t.Run(c.name, func(t *testing.T) {
			props := debeziumtest.DefaultConnectorProperties("dbz-"+c.name, debeziumtest.PG{Port: 5432, DBName: "app"})
			for k, v := range c.connectorProps() {
				if v == "" {
					delete(props, k)
				} else {
					props[k] = v
				}
			}
			keys := make([]string, 0, len(props))
			for k := range props {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			conn := debezium.NewProperties("connector", props, keys)
			worker := debezium.NewProperties("worker", map[string]string{
				"bootstrap.servers": "127.0.0.1:9092",
				"key.converter":     debeziumtest.StringConverter,
				"value.converter":   debeziumtest.StringConverter,
			}, []string{"bootstrap.servers", "key.converter", "value.converter"})
			tr, err := debezium.Translate(conn, worker)
			if err != nil {
				t.Fatal(err)
			}
			got := tr.Router
			want := c.routerConfig(t)
			// What the records test sets for its own plumbing.
			got.RunID = want.RunID
			got.TopicReplacement = want.TopicReplacement
			// schemas.enable means something to JsonConverter only.
			for _, p := range []*struct{ g, w *eventrouter.ConverterConfig }{{&got.KeyConverter, &want.KeyConverter}, {&got.ValueConverter, &want.ValueConverter}} {
				if p.w.Kind != eventrouter.JSONConverter {
					p.w.SchemasEnable = p.g.SchemasEnable
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("translation\n got %+v\nwant %+v", got, want)
			}
		})
	}
}
