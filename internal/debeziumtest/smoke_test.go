package debeziumtest_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// canonicalOutbox is the outbox table of Debezium's Outbox Event Router
// documentation, with the router's default column names.
const canonicalOutbox = `
CREATE TABLE public.outbox (
    id            uuid         PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb
)`

// TestSmoke runs real Debezium (Connect standalone, Postgres connector,
// Outbox Event Router) between a real Postgres and a real broker: outbox
// rows come out on outbox.event.<aggregatetype> keyed by aggregateid, with
// the payload as value and the event id in the `id` header, and a graceful
// Stop writes the offsets file (the periodic flush is out of reach).
func TestSmoke(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv := sharedPG.Server(t)
	broker := sharedKafka.Broker(t)
	db := pgtest.NewDatabase(t, srv)
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, canonicalOutbox); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	c := debeziumtest.StartT(t, debeziumtest.Options{
		Bootstrap: broker.Addr(),
		PG:        debeziumtest.PG{Port: srv.Port(), DBName: db},
		Name:      "smoke",
		Connector: map[string]string{"slot.name": "smoke", "publication.name": "smoke"},
		// No periodic flush within the test: the offsets file can only
		// come from the graceful Stop.
		Worker: map[string]string{"offset.flush.interval.ms": "600000"},
	})
	t.Logf("Connect with Debezium RUNNING %v after Start (classpath resolution included)", time.Since(start).Round(time.Millisecond))
	if got := c.ConnectorProperties()["database.dbname"]; got != db {
		t.Errorf("ConnectorProperties database.dbname = %q, want %q", got, db)
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
		err := conn.QueryRow(ctx,
			`INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
			 VALUES ($1, 'order', $2, 'OrderCreated', $3) RETURNING payload::text`,
			r.id, r.aggregateID, r.payload).Scan(&text)
		if err != nil {
			t.Fatal(err)
		}
		want[r.id] = row{r.id, r.aggregateID, text}
	}

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...),
		kgo.ConsumeTopics("outbox.event.order"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < len(rows) {
		fetches := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(got), len(rows))
		}
		for _, e := range fetches.Errors() {
			// Topic auto-creation races the first fetch; anything else is
			// a real failure.
			if e.Err != nil && !kgo.IsRetryableBrokerErr(e.Err) {
				t.Fatalf("fetch %s/%d: %v", e.Topic, e.Partition, e.Err)
			}
		}
		got = append(got, fetches.Records()...)
	}
	perKey := map[string][]string{}
	for _, rec := range got {
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
	if err := c.Stop(ctx); err != nil {
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

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
