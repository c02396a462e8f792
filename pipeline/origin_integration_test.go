package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
)

// TestOriginNone: with Origin none (Debezium's slot.stream.params
// origin=none), changes applied by logical replication from another server
// (they carry a replication origin) are left out by the server, as Debezium
// leaves them out; walbox used to ignore the setting and re-emit them. An
// older server, whose pgoutput has no origin parameter, is refused with
// what to do instead of relaying them silently.
func TestOriginNone(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		e := startEnvWith(t, time.Second, func(c *pipeline.Config) { c.Origin = pipeline.OriginNone }, pgtest.WithBinDir(v.BinDir))
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		if v.Major < 16 {
			select {
			case err := <-e.done:
				if err == nil || !strings.Contains(err.Error(), "needs PostgreSQL 16") || !strings.Contains(err.Error(), "slot.stream.params") {
					t.Fatalf("relay with origin none on PostgreSQL %d = %v, want a refusal naming the version and the setting", v.Major, err)
				}
			case <-ctx.Done():
				t.Fatalf("relay with origin none on PostgreSQL %d kept running", v.Major)
			}
			return
		}
		// A change as a subscription applies it: in a session with a
		// replication origin.
		replicated, err := pgx.Connect(ctx, e.srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer replicated.Close(context.Background())
		if _, err := replicated.Exec(ctx, `SELECT pg_replication_origin_create('other_server')`); err != nil {
			t.Fatal(err)
		}
		if _, err := replicated.Exec(ctx, `SELECT pg_replication_origin_session_setup('other_server')`); err != nil {
			t.Fatal(err)
		}
		gen := outboxtest.NewGenerator(1, 5)
		foreign := gen.Batch(3)
		if err := outboxtest.WriteTx(ctx, replicated, foreign); err != nil {
			t.Fatal(err)
		}
		local := gen.Batch(3)
		if err := outboxtest.WriteTx(ctx, e.conn, local); err != nil {
			t.Fatal(err)
		}
		consumer, err := outboxtest.NewConsumer(e.brokers, "outbox\\.event\\..*")
		if err != nil {
			t.Fatal(err)
		}
		defer consumer.Close()
		got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return outboxtest.DistinctIDs(got) >= len(local) })
		if err != nil {
			t.Fatal(err)
		}
		ids := map[string]bool{}
		for _, g := range got {
			ids[g.Headers["event_id"]] = true
		}
		for _, ev := range foreign {
			if ids[ev.ID] {
				t.Errorf("event %s, replicated from another origin, was relayed with origin none", ev.ID)
			}
		}
		for _, ev := range local {
			if !ids[ev.ID] {
				t.Errorf("local event %s missing", ev.ID)
			}
		}
	})
}
