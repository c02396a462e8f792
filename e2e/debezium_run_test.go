package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// walbox run --debezium-config on a first start, with no Debezium ever
// run: the connector's files alone give walbox its connection, slot,
// publication (created FOR TABLE, publication.autocreate.mode=filtered),
// brokers and EventRouter, and the records come out in Debezium's form
// (topic outbox.event.<aggregate_type>, key aggregate_id, value the
// payload, the event id in the "id" header). Needs no Java.
func TestDebeziumModeRun(t *testing.T) {
	parallel(t)
	for _, delivery := range []string{"at-least-once", "exactly-once"} {
		t.Run(delivery, func(t *testing.T) { testDebeziumModeRun(t, delivery) })
	}
}

// testDebeziumModeRun runs Debezium mode with the given --delivery: the
// EventRouter's records go through a Kafka transaction as walbox's own do.
func testDebeziumModeRun(t *testing.T, delivery string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers := kfakeBrokers(t)
	pg := pgtest.Start(t, pgtest.WorkMemServerDefault) // Debezium speaks protocol 1: 64kB would make it spill
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
	connector := fmt.Sprintf(`# as a Debezium user would write it
name=orders-outbox
connector.class=io.debezium.connector.postgresql.PostgresConnector
tasks.max=1
database.hostname=127.0.0.1
database.port=%d
database.user=postgres
database.dbname=%s
topic.prefix=orders
plugin.name=pgoutput
slot.name=orders_outbox
publication.name=orders_outbox
publication.autocreate.mode=filtered
table.include.list=public.outbox
snapshot.mode=no_data
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.table.field.event.key=aggregate_id
transforms.outbox.route.by.field=aggregate_type
transforms.outbox.table.fields.additional.placement=event_type:header:eventType
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
`, pg.Port(), db)
	worker := "bootstrap.servers=" + brokers[0] + "\noffset.flush.interval.ms=60000\n"
	cpath, wpath := filepath.Join(dir, "connector.properties"), filepath.Join(dir, "worker.properties")
	if err := os.WriteFile(cpath, []byte(connector), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(wpath, []byte(worker), 0o600); err != nil {
		t.Fatal(err)
	}
	col := startCollector(ctx, t, brokers)
	p := startWalbox(t, []string{"WALBOX_METRICS_ADDR=127.0.0.1:0"}, "--debezium-config", cpath, "--debezium-worker-config", wpath, "--delivery", delivery)
	waitUntil(ctx, t, time.Minute, "walbox to stream from slot orders_outbox", func() bool {
		var active bool
		_ = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'orders_outbox'").Scan(&active)
		return active || p.exited()
	})
	gen := outboxtest.NewGenerator(3, 8)
	var written []outboxtest.Event
	for range 20 {
		evs := gen.Batch(2)
		if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
			t.Fatal(err)
		}
		written = append(written, evs...)
	}
	waitUntil(ctx, t, time.Minute, "every event", func() bool { return distinctIDs(col) >= len(written) || p.exited() })
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox exit code %d", code)
	}
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
			t.Errorf("record with headers %v matches no event", r.Headers)
			continue
		}
		var payload, want any
		_ = json.Unmarshal(r.Value, &payload)
		_ = json.Unmarshal(e.Payload, &want)
		if r.Topic != e.Topic() || r.Key != e.AggregateID || r.Headers["eventType"] != e.EventType || fmt.Sprint(payload) != fmt.Sprint(want) {
			t.Errorf("record %s/%s key %s headers %v value %s; want topic %s key %s type %s", r.Topic, r.Headers["id"], r.Key, r.Headers, r.Value, e.Topic(), e.AggregateID, e.EventType)
		}
		if _, ok := r.Headers["event_id"]; ok {
			t.Errorf("record has walbox's event_id header in Debezium mode: %v", r.Headers)
		}
	}
	if delivery == "exactly-once" {
		// The events went through Kafka transactions: their position is
		// committed under the slot's transactional id.
		if n := stateRecords(ctx, t, brokers, "walbox.state", "walbox-orders_outbox"); n == 0 {
			t.Error("no committed position in walbox.state for transactional id walbox-orders_outbox")
		}
	}
	var pubTables int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_publication_tables WHERE pubname = 'orders_outbox' AND tablename = 'outbox'").Scan(&pubTables); err != nil || pubTables != 1 {
		t.Errorf("publication orders_outbox: %d tables, %v", pubTables, err)
	}
}

// stateRecords counts the committed records of key in the exactly-once
// state topic, read from the start to its end with read_committed.
func stateRecords(ctx context.Context, t *testing.T, brokers []string, topic, key string) int {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	n := 0
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for n == 0 && pctx.Err() == nil {
		cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) {
			if string(r.Key) == key {
				n++
			}
		})
	}
	return n
}
