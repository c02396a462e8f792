package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/internal/registrytest"
	"github.com/walbox/walbox/schemareg"
)

// generatorAvro is the Avro schema of outboxtest.Generator's payloads.
const generatorAvro = `{"type": "record", "name": "Event", "namespace": "shop", "fields": [
  {"name": "aggregate_id", "type": "string"},
  {"name": "seq", "type": "long"},
  {"name": "amount_cents", "type": "long"},
  {"name": "pad", "type": "string"}]}`

// generatorPayload is the Go form of a Generator payload, for Avro and
// JSON alike.
type generatorPayload struct {
	AggregateID string `avro:"aggregate_id" json:"aggregate_id"`
	Seq         int64  `avro:"seq" json:"seq"`
	AmountCents int64  `avro:"amount_cents" json:"amount_cents"`
	Pad         string `avro:"pad" json:"pad"`
}

// The "done when": a Debezium connector file using Confluent's
// AvroConverter (auto.register.schemas=false, use.latest.version=true,
// table.expand.json.payload=true) against a registry that holds each
// topic's schema works unchanged with walbox run --debezium-config: every
// record decodes with the registered schema to its row's payload, and a
// payload that breaks the schema stops walbox naming the row (Debezium mode
// has no dead-letter topic: Debezium fails its task). The short run uses
// franz-go's fake registry served over HTTP; the full run Apicurio.
func TestDebeziumModeAvro(t *testing.T) {
	parallel(t)
	f := srfake.New()
	t.Cleanup(f.Close)
	t.Run("Avro key too", func(t *testing.T) {
		testDebeziumModeAvro(t, f.URL(), confluentAvroConverter(f.URL()), avroRun{avroKey: true})
	})
	t.Run("exactly-once", func(t *testing.T) {
		fulltest.Require(t, "Debezium mode with Avro through Kafka transactions; the short run covers at-least-once")
		testDebeziumModeAvro(t, f.URL(), confluentAvroConverter(f.URL()), avroRun{exactlyOnce: true})
	})
}

// avroRun varies testDebeziumModeAvro.
type avroRun struct {
	// avroKey makes the key converter Confluent's AvroConverter too, with
	// "string" registered under <topic>-key.
	avroKey bool
	// exactlyOnce runs walbox with --delivery exactly-once.
	exactlyOnce bool
}

// confluentAvroConverter is the value converter of the "done when".
func confluentAvroConverter(url string) string {
	return `value.converter=io.confluent.connect.avro.AvroConverter
value.converter.schema.registry.url=` + url + `
value.converter.auto.register.schemas=false
value.converter.use.latest.version=true
value.converter.latest.compatibility.strict=false
value.converter.value.subject.name.strategy=io.confluent.kafka.serializers.subject.TopicNameStrategy
`
}

// TestDebeziumModeAvroApicurio is TestDebeziumModeAvro against Apicurio
// Registry 2.4.2's Confluent-compatible API.
func TestDebeziumModeAvroApicurio(t *testing.T) {
	fulltest.Require(t, "starts Apicurio Registry")
	parallel(t)
	reg := registrytest.Start(t)
	t.Run("confluent converter", func(t *testing.T) {
		testDebeziumModeAvro(t, reg.URL, confluentAvroConverter(reg.URL), avroRun{avroKey: true})
	})
	// Apicurio's own converter in its Confluent layout, given Apicurio's
	// native API URL: walbox speaks the Confluent-compatible API beside it.
	t.Run("apicurio converter", func(t *testing.T) {
		testDebeziumModeAvro(t, reg.URL, `value.converter=io.apicurio.registry.utils.converter.AvroConverter
value.converter.apicurio.registry.url=`+strings.TrimSuffix(reg.URL, "/apis/ccompat/v7")+`/apis/registry/v2
value.converter.apicurio.registry.auto-register=false
value.converter.apicurio.registry.find-latest=true
value.converter.apicurio.registry.as-confluent=true
value.converter.apicurio.registry.use-id=contentId
value.converter.apicurio.registry.headers.enabled=false
`, avroRun{})
	})
}

func testDebeziumModeAvro(t *testing.T, registryURL, converter string, run avroRun) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	admin, err := sr.NewClient(sr.URLs(registryURL))
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]int{}
	for _, topic := range []string{"outbox.event.order", "outbox.event.customer"} {
		ss, err := admin.CreateSchema(ctx, topic+"-value", sr.Schema{Schema: generatorAvro})
		if err != nil {
			t.Fatal(err)
		}
		ids[topic] = ss.ID
		if run.avroKey {
			ks, err := admin.CreateSchema(ctx, topic+"-key", sr.Schema{Schema: `"string"`})
			if err != nil {
				t.Fatal(err)
			}
			ids[topic+"-key"] = ks.ID
		}
	}
	keyConverter := "key.converter=org.apache.kafka.connect.storage.StringConverter\n"
	if run.avroKey {
		keyConverter = strings.ReplaceAll(confluentAvroConverter(registryURL), "value.converter", "key.converter")
		keyConverter = strings.ReplaceAll(keyConverter, "key.converter.value.subject.name.strategy", "key.converter.key.subject.name.strategy")
	}
	brokers := kfakeBrokers(t)
	pg := pgtest.Start(t, pgtest.WorkMemServerDefault)
	db := pgtest.NewDatabase(t, pg)
	conn, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	connector := fmt.Sprintf(`name=orders-outbox
connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=127.0.0.1
database.port=%d
database.user=postgres
database.dbname=%s
topic.prefix=orders
plugin.name=pgoutput
slot.name=orders_avro
publication.name=orders_avro
publication.autocreate.mode=filtered
table.include.list=public.outbox
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.table.field.event.key=aggregate_id
transforms.outbox.route.by.field=aggregate_type
transforms.outbox.table.expand.json.payload=true
%s%s`, pg.Port(), db, keyConverter, converter)
	cpath, wpath := filepath.Join(dir, "connector.properties"), filepath.Join(dir, "worker.properties")
	if err := os.WriteFile(cpath, []byte(connector), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wpath, []byte("bootstrap.servers="+brokers[0]+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	col := startCollector(ctx, t, brokers)
	args := []string{"--debezium-config", cpath, "--debezium-worker-config", wpath}
	if run.exactlyOnce {
		args = append(args, "--delivery", "exactly-once")
	}
	p := startWalbox(t, []string{"WALBOX_METRICS_ADDR=127.0.0.1:0"}, args...)
	waitUntil(ctx, t, time.Minute, "walbox to stream from slot orders_avro", func() bool {
		var active bool
		_ = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'orders_avro'").Scan(&active)
		return active || p.exited()
	})
	gen := outboxtest.NewGenerator(5, 6)
	var written []outboxtest.Event
	for range 10 {
		evs := gen.Batch(2)
		if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
			t.Fatal(err)
		}
		written = append(written, evs...)
	}
	waitUntil(ctx, t, time.Minute, "every event", func() bool { return distinctIDs(col) >= len(written) || p.exited() })

	// A payload that breaks the schema: seq is a string.
	bad := gen.Next()
	bad.Payload = []byte(`{"aggregate_id": "x", "seq": "seven", "amount_cents": 1, "pad": ""}`)
	if err := outboxtest.WriteTx(ctx, conn, []outboxtest.Event{bad}); err != nil {
		t.Fatal(err)
	}
	waitUntil(ctx, t, time.Minute, "walbox to stop on the invalid payload", p.exited)
	if code := p.cmd.ProcessState.ExitCode(); code == 0 {
		t.Errorf("walbox exit code 0 after an invalid payload")
	}
	for _, want := range []string{bad.ID, "$.seq", `"outbox.event.` + bad.AggregateType + `-value"`, "LSN"} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("walbox's error does not name %s", want)
		}
	}

	schema := avro.MustParse(generatorAvro)
	byID := map[string]outboxtest.Event{}
	for _, e := range written {
		byID[e.ID] = e
	}
	got := col.snapshot()
	if len(got) != len(written) {
		t.Errorf("%d records for %d events", len(got), len(written))
	}
	for _, r := range got {
		e, ok := byID[r.Headers["id"]]
		if !ok {
			t.Errorf("record with headers %v matches no event (the invalid row was produced?)", r.Headers)
			continue
		}
		id, body, err := schemareg.ParseHeader(r.Value)
		if err != nil || int(id) != ids[r.Topic] {
			t.Errorf("record %s: schema id %d (want %d), %v", e.ID, id, ids[r.Topic], err)
			continue
		}
		var gotP, wantP generatorPayload
		if err := avro.Unmarshal(schema, body, &gotP); err != nil {
			t.Errorf("record %s does not decode with the registered schema: %v", e.ID, err)
		}
		if err := json.Unmarshal(e.Payload, &wantP); err != nil {
			t.Fatal(err)
		}
		key := r.Key
		if run.avroKey {
			kid, kbody, err := schemareg.ParseHeader([]byte(r.Key))
			if err == nil && int(kid) != ids[r.Topic+"-key"] {
				err = fmt.Errorf("key schema id %d, want %d", kid, ids[r.Topic+"-key"])
			}
			if err == nil {
				err = avro.Unmarshal(avro.MustParse(`"string"`), kbody, &key)
			}
			if err != nil {
				t.Errorf("record %s: key %q: %v", e.ID, r.Key, err)
			}
		}
		if gotP != wantP || r.Topic != e.Topic() || key != e.AggregateID {
			t.Errorf("record %s/%s key %s: %+v; want %s key %s %+v", r.Topic, e.ID, r.Key, gotP, e.Topic(), e.AggregateID, wantP)
		}
	}
	// Nothing past the last acknowledged record is confirmed: the invalid
	// row's transaction is still in the slot.
	var pending bool
	if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn < pg_current_wal_lsn() FROM pg_replication_slots WHERE slot_name = 'orders_avro'").Scan(&pending); err != nil || !pending {
		t.Errorf("the slot was confirmed past the invalid row (pending %v, %v)", pending, err)
	}
}
