package debeziumtest_test

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/fulltest"
)

// TestSmoke runs real Debezium (Connect standalone, Postgres connector,
// Outbox Event Router) between a real Postgres and a real broker: outbox
// rows come out on outbox.event.<aggregatetype> keyed by aggregateid, with
// the payload as value and the event id in the `id` header, and a graceful
// Stop writes the offsets file (the periodic flush is out of reach).
func TestSmoke(t *testing.T) {
	fulltest.Require(t, "the Kafka Connect harness")
	f := newFixture(t, "smoke")
	start := time.Now()
	c := debeziumtest.StartT(t, f.opts)
	t.Logf("Connect with Debezium streaming %v after Start (classpath resolution included)", time.Since(start).Round(time.Millisecond))
	if got := c.ConnectorProperties()["database.dbname"]; got != f.db {
		t.Errorf("ConnectorProperties database.dbname = %q, want %q", got, f.db)
	}

	type row struct{ id, aggregateID, payload string }
	rows := []row{
		{"5d8c4e1e-4c1e-4a7f-9a0e-000000000001", "order-1", `{"n": 1, "item": "book"}`},
		{"5d8c4e1e-4c1e-4a7f-9a0e-000000000002", "order-2", `{"n": 2}`},
		{"5d8c4e1e-4c1e-4a7f-9a0e-000000000003", "order-1", `{"n": 3, "nested": {"a": [1, 2]}}`},
	}
	want := map[string]row{} // by event id; the value is Postgres' jsonb text
	for _, r := range rows {
		var text string
		err := f.conn.QueryRow(f.ctx,
			`INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
			 VALUES ($1, 'order', $2, 'OrderCreated', $3) RETURNING payload::text`,
			r.id, r.aggregateID, r.payload).Scan(&text)
		if err != nil {
			t.Fatal(err)
		}
		want[r.id] = row{r.id, r.aggregateID, text}
	}

	perKey := map[string][]string{}
	for _, rec := range f.poll(t, f.consume(t, "outbox.event.order"), len(rows)) {
		id := header(rec, "id")
		w, ok := want[id]
		if !ok {
			t.Errorf("record with id header %q (headers %v) matches no row", id, rec.Headers)
			continue
		}
		if string(rec.Key) != w.aggregateID {
			t.Errorf("record %s: key %q, want %q", id, rec.Key, w.aggregateID)
		}
		if string(rec.Value) != w.payload {
			t.Errorf("record %s: value %q, want %q", id, rec.Value, w.payload)
		}
		perKey[string(rec.Key)] = append(perKey[string(rec.Key)], id)
	}
	if ids := perKey["order-1"]; fmt.Sprint(ids) != fmt.Sprint([]string{rows[0].id, rows[2].id}) {
		t.Errorf("order-1 events in order %v, want %v", ids, []string{rows[0].id, rows[2].id})
	}

	stopStart := time.Now()
	if err := c.Stop(f.ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("graceful Stop took %v", time.Since(stopStart).Round(time.Millisecond))
	fi, err := os.Stat(c.OffsetsFile())
	if err != nil {
		t.Fatalf("offsets file after a graceful stop: %v", err)
	}
	if fi.Size() == 0 {
		t.Fatalf("offsets file %s is empty after a graceful stop", c.OffsetsFile())
	}
}
