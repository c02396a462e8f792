package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestDSNWithReplicationParameter: a DSN written for a replication
// connection (replication=database), which slotctl always accepted, works
// for walbox run too (issue 7, item 9): walbox's ordinary session drops the
// parameter and its replication connection sets it itself. Before, walbox
// could not use such a DSN for its slot setup.
func TestDSNWithReplicationParameter(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg, conn := startOutboxPostgres(ctx, t)
	brokers := kfakeBrokers(t)
	p := startWalbox(t, []string{
		"WALBOX_PG_DSN=" + pg.DSN("postgres") + "&replication=database",
		"WALBOX_KAFKA_BROKERS=" + brokers[0],
		"WALBOX_STATUS_INTERVAL=200ms",
		"WALBOX_METRICS_ADDR=127.0.0.1:0",
		"WALBOX_LOG_FORMAT=text",
	})
	waitUntil(ctx, t, time.Minute, "walbox to stream", func() bool { return strings.Contains(p.stderr.String(), "msg=streaming") })

	if _, err := conn.Exec(ctx, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
		VALUES ('order', 'ord-dsn', 'OrderCreated', '{}')`); err != nil {
		t.Fatal(err)
	}
	c, err := outboxtest.NewConsumer(brokers, `outbox\.event\.order`)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	got, err := c.ReadUntil(ctx, func(r []outboxtest.Received) bool { return len(r) >= 1 })
	if err != nil {
		t.Fatalf("reading the event: %v\nwalbox log:\n%s", err, p.stderr.Tail(4000))
	}
	if got[0].Key != "ord-dsn" {
		t.Errorf("record key = %q, want ord-dsn", got[0].Key)
	}
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox exited %d, want 0", code)
	}
}

// startOutboxPostgres starts a test server with the outbox table (no
// publication, no slot: walbox's first start makes them) and returns a
// connection to its postgres database, closed when the test ends.
func startOutboxPostgres(ctx context.Context, t *testing.T) (*pgtest.Server, *pgx.Conn) {
	t.Helper()
	pg := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	return pg, conn
}
