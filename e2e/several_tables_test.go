package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// walbox run with two outbox tables in --table: one publication and one
// slot, created on the first start, carry the events of both, and each
// arrives once on its topic, in per-aggregate order.
func TestSeveralOutboxTables(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	brokers := kfakeBrokers(t)
	pg := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{outboxtest.DDL, "CREATE SCHEMA billing", "CREATE TABLE billing.outbox (LIKE public.outbox INCLUDING ALL)"} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	col := startCollector(ctx, t, brokers)
	p := startWalbox(t, []string{
		"WALBOX_PG_DSN=" + pg.DSN("postgres"), "WALBOX_KAFKA_BROKERS=" + brokers[0], "WALBOX_METRICS_ADDR=127.0.0.1:0",
		"WALBOX_TABLE=public.outbox, billing.outbox", "WALBOX_STATUS_INTERVAL=200ms",
	})
	waitUntil(ctx, t, time.Minute, "walbox to stream", func() bool {
		var active bool
		_ = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'walbox'").Scan(&active)
		return active || p.exited()
	})
	var tables []string
	if err := conn.QueryRow(ctx, "SELECT array_agg(schemaname || '.' || tablename ORDER BY schemaname, tablename) FROM pg_publication_tables WHERE pubname = 'walbox'").Scan(&tables); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(tables) != "[billing.outbox public.outbox]" {
		t.Errorf("publication tables %v", tables)
	}

	gen := outboxtest.NewGenerator(7, 10)
	var written []outboxtest.Event
	for i := range 40 {
		evs := gen.Batch(1 + i%3)
		table := "public.outbox"
		if i%2 == 1 {
			table = "billing.outbox"
		}
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			h, _ := json.Marshal(e.Headers)
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)",
				e.ID, e.AggregateType, e.AggregateID, e.EventType, string(e.Payload), string(h)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		written = append(written, evs...)
	}
	waitUntil(ctx, t, time.Minute, fmt.Sprintf("%d events from both tables", len(written)), func() bool {
		return col.distinct() >= len(written) || p.exited()
	})
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox exit code %d", code)
	}
	rep := outboxtest.Check(written, col.snapshot())
	if !rep.OK() || rep.Duplicates != 0 {
		t.Fatalf("%s", rep)
	}
}
