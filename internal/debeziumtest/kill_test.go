package debeziumtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestKillResendsUnflushed shows what a crash of Debezium means, which the
// takeover and comparison tests rely on: Kill writes no offsets, so after a
// Restart Debezium streams again from the slot's confirmed position, and
// an event it had already delivered is delivered a second time
// (Debezium's at-least-once window), none lost.
func TestKillResendsUnflushed(t *testing.T) {
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
	c := debeziumtest.StartT(t, debeziumtest.Options{
		Bootstrap: broker.Addr(),
		PG:        debeziumtest.PG{Port: srv.Port(), DBName: db},
		Name:      "kill",
		Connector: map[string]string{"slot.name": "kill", "publication.name": "kill"},
		Worker:    map[string]string{"offset.flush.interval.ms": "600000"},
	})
	const id = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
	if _, err := conn.Exec(ctx, `INSERT INTO public.outbox (id, aggregatetype, aggregateid, type, payload)
		VALUES ($1, 'customer', 'c-1', 'CustomerCreated', '{"name": "Ada"}')`, id); err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...),
		kgo.ConsumeTopics("outbox.event.customer"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	waitIDs := func(n int) []string {
		t.Helper()
		var ids []string
		for len(ids) < n {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil {
				t.Fatalf("consumed %d of %d records before the deadline (ids %v)", len(ids), n, ids)
			}
			fs.EachRecord(func(r *kgo.Record) { ids = append(ids, header(r, "id")) })
		}
		return ids
	}
	if ids := waitIDs(1); ids[0] != id {
		t.Fatalf("first delivery: id %q, want %q", ids[0], id)
	}

	c.Kill()
	if fi, err := os.Stat(c.OffsetsFile()); err == nil && fi.Size() > 0 {
		t.Fatalf("offsets file has %d bytes after a kill with no flush due; the test cannot tell a resend from a flush", fi.Size())
	}
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if ids := waitIDs(1); ids[0] != id {
		t.Fatalf("after the restart: id %q, want the same event %q again", ids[0], id)
	}
}
