package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/slotctl"
)

// TestStreamingFallbackEndsUnderTrafficExactlyOnce: with exactly-once
// delivery, the protocol version 1 fallback for a transaction X ends once X
// ended, also while small transactions keep coming. It failed when the
// session waited for a moment with no Kafka transaction open: under steady
// traffic every commit's window saw a record, a new Kafka transaction opened
// at once, and walbox never streamed again. Real PostgreSQL; kfake for
// Kafka (the fallback's end is walbox's own bookkeeping).
func TestStreamingFallbackEndsUnderTrafficExactlyOnce(t *testing.T) {
	fulltest.Require(t, "a real broker under steady traffic; the short run ends the fallback at least once")
	srv := pgtest.Start(t, smallWorkMem)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	broker := kafkatest.Start(t)
	stateTopic := "walbox.state." + strconv.FormatInt(time.Now().UnixNano(), 36)
	run := startEOSRelay(t, conn, srv.DSN("postgres"), broker.Addrs(), "walbox", stateTopic, func(c *pipeline.Config) {
		c.SpoolDir = t.TempDir()
		c.MessagePrefix = "outbox"
		c.StatusInterval = 200 * time.Millisecond
		c.TransactionMaxInterval = 100 * time.Millisecond
	})
	defer func() {
		if err := run.stop(t); err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("relay: %v", err)
		}
	}()
	wait := func(name string, want float64, what string) {
		t.Helper()
		for metricSum(t, run.reg, name) < want {
			if ctx.Err() != nil {
				t.Fatalf("%s: %s stayed at %v", what, name, metricSum(t, run.reg, name))
			}
			time.Sleep(50 * time.Millisecond) // polling a metric, with the context's deadline
		}
	}
	gen := outboxtest.NewGenerator(41, 4)
	conn2, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(context.Background())
	tx := ambiguousTx(t, ctx, conn2, gen)
	if err := copyEvents(ctx, tx, gen.Batch(2_000)); err != nil {
		t.Fatal(err)
	}
	wait("walbox_streamed_unstreamed_total", 1, "no fallback")

	// Steady small transactions from here on, until the test ends.
	tctx, stopTraffic := context.WithCancel(ctx)
	const writers = 4
	trafficDone := make(chan error, writers)
	var rows atomic.Int64
	for w := range writers {
		c, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		g := outboxtest.NewGenerator(uint64(42+w), 4)
		go func() {
			for tctx.Err() == nil {
				if err := outboxtest.WriteTx(tctx, c, g.Batch(1)); err != nil && tctx.Err() == nil {
					trafficDone <- err
					return
				}
				rows.Add(1)
			}
			trafficDone <- nil
		}()
	}
	began := time.Now()
	defer func() {
		stopTraffic()
		for range writers {
			if err := <-trafficDone; err != nil {
				t.Errorf("traffic: %v", err)
			}
		}
		t.Logf("traffic: %d transactions in %s", rows.Load(), time.Since(began).Round(time.Millisecond))
	}()
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// Large transactions, paced, until one streams again.
	deadline := time.Now().Add(60 * time.Second)
	for metricSum(t, run.reg, "walbox_streamed_transactions_total") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("no transaction streamed within 60 s after X rolled back, with steady traffic: walbox stayed on protocol version 1")
		}
		if err := outboxtest.WriteTx(ctx, conn, gen.Batch(2_000)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // pacing the writer, not synchronisation
	}
}
