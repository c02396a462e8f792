package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
)

// TestSlotMovedAheadIsReported (issue 26's Patroni work): while walbox was
// disconnected, someone moved its slot past walbox's position (here
// pg_replication_slot_advance; a slot created again by an HA manager after
// a failover does the same). START_REPLICATION at walbox's position then
// starts at the slot's, silently: the rows committed in between were never
// delivered and nothing said so. Now the session reports the range, on the
// metric and on what /readyz reads.
func TestSlotMovedAheadIsReported(t *testing.T) {
	parallel(t)
	// A reconnect delay of 1 to 2 s leaves the test time to move the slot
	// while walbox is away; the loop below copes with a faster walbox.
	e := startEnvWith(t, 100*time.Millisecond, func(c *pipeline.Config) { c.BackoffMin, c.BackoffMax = 2*time.Second, 4*time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gen := outboxtest.NewGenerator(7, 10)
	if err := outboxtest.WriteTx(ctx, e.conn, gen.Batch(5)); err != nil {
		t.Fatal(err)
	}
	delivered := currentLSN(t, ctx, e.conn)
	waitFor(t, 30*time.Second, "walbox to confirm its first events", func() bool { return e.confirmedFlush(t) >= delivered })

	var moved pglogrepl.LSN
	for attempt := 0; moved == 0; attempt++ {
		if attempt == 20 {
			t.Fatal("walbox reconnected before the slot could be advanced, 20 times")
		}
		// Cut walbox's session, waiting for its walsender to exit.
		if _, err := e.conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 10000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slotName); err != nil {
			t.Fatal(err)
		}
		// Rows committed while walbox is away, then the slot moved past them.
		if err := outboxtest.WriteTx(ctx, e.conn, gen.Batch(3)); err != nil {
			t.Fatal(err)
		}
		err := e.conn.QueryRow(ctx, `SELECT end_lsn FROM pg_replication_slot_advance($1, pg_current_wal_lsn())`, e.slotName).Scan(&moved)
		if err != nil && !strings.Contains(err.Error(), "is active") {
			t.Fatal(err)
		}
	}
	t.Logf("slot advanced to %s while walbox was disconnected", moved)

	waitFor(t, 30*time.Second, "the skipped range to be reported", func() bool {
		_, _, _, n := e.relay.SlotSkipped()
		return n > 0
	})
	from, to, _, n := e.relay.SlotSkipped()
	if n != 1 || to != moved || from >= moved || from < delivered {
		t.Fatalf("SlotSkipped = %s..%s (%d ranges), want one range from walbox's position (at least %s) to the slot's %s", from, to, n, delivered, moved)
	}
	if got, want := metricSum(t, e.reg, "walbox_slot_skipped_wal_bytes_total"), float64(to-from); got != want {
		t.Errorf("walbox_slot_skipped_wal_bytes_total = %v, want %v (%s - %s)", got, want, to, from)
	}
	// Streaming goes on from the slot's position.
	if err := outboxtest.WriteTx(ctx, e.conn, gen.Batch(2)); err != nil {
		t.Fatal(err)
	}
	after := currentLSN(t, ctx, e.conn)
	waitFor(t, 30*time.Second, "walbox to confirm the events after the gap", func() bool { return e.confirmedFlush(t) >= after })
}

// TestStandbyPeerAheadIsNotReported: a --standby pair. A loses its
// session, B takes the slot over and confirms further, A stands by; when B
// stops, A streams again from a slot ahead of its own position. B
// delivered that range: nothing is reported.
func TestStandbyPeerAheadIsNotReported(t *testing.T) {
	parallel(t)
	e := startEnvWith(t, 100*time.Millisecond, func(c *pipeline.Config) {
		c.Standby, c.StandbyRetry = true, 200*time.Millisecond
		c.BackoffMin, c.BackoffMax = 2*time.Second, 4*time.Second
	})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	gen := outboxtest.NewGenerator(8, 10)
	if err := outboxtest.WriteTx(ctx, e.conn, gen.Batch(5)); err != nil {
		t.Fatal(err)
	}
	first := currentLSN(t, ctx, e.conn)
	waitFor(t, 30*time.Second, "A to confirm its first events", func() bool { return e.confirmedFlush(t) >= first })

	kcl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.StandbyRetry = 20 * time.Millisecond
	reg := prometheus.NewRegistry()
	b, err := pipeline.New(cfg, kcl, rt, reg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	bctx, bcancel := context.WithCancel(context.Background())
	bdone := make(chan error, 1)
	go func() { bdone <- b.Run(bctx, e.confirmedFlush(t)) }()
	stopB := func() {
		if bcancel != nil {
			bcancel()
			if err := <-bdone; err != nil {
				t.Errorf("relay B: %v", err)
			}
			bcancel = nil
		}
	}
	t.Cleanup(stopB)
	waitFor(t, 30*time.Second, "B to stand by", b.Standby)

	// A loses its session; B, retrying every 20 ms, takes the slot before
	// A's reconnect (1 to 2 s later) and confirms more events.
	if _, err := e.conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid, 10000) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, e.slotName); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "B to take over", b.Streaming)
	if err := outboxtest.WriteTx(ctx, e.conn, gen.Batch(5)); err != nil {
		t.Fatal(err)
	}
	second := currentLSN(t, ctx, e.conn)
	waitFor(t, 30*time.Second, "B to confirm the events it sent", func() bool { return e.confirmedFlush(t) >= second })
	waitFor(t, 30*time.Second, "A to stand by", e.relay.Standby)

	stopB()
	waitFor(t, 30*time.Second, "A to take over again", e.relay.Streaming)
	if _, _, _, n := e.relay.SlotSkipped(); n != 0 {
		t.Errorf("A reported %d skipped ranges after its standby peer held the slot", n)
	}
	if got := metricSum(t, e.reg, "walbox_slot_skipped_wal_bytes_total"); got != 0 {
		t.Errorf("walbox_slot_skipped_wal_bytes_total = %v on A, want 0: B delivered the range", got)
	}
	if _, _, _, n := b.SlotSkipped(); n != 0 {
		t.Errorf("B reported %d skipped ranges", n)
	}
}
