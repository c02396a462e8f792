package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
)

// TestVanishedSlotStopsWalbox is issue 7's reproduction with the binary:
// stop walbox, drop its slot, commit 200 events, start walbox. It used to
// create a new slot at "now" and log only "slot ready", so the 200 events
// were never sent. Now it exits 2 (its preflight refuses, as walbox config
// check --connect does) saying what happened and how to recover,
// and creates the slot only when started with WALBOX_CREATE_SLOT=true
// (--create-slot).
func TestVanishedSlotStopsWalbox(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pg, conn := startOutboxPostgres(ctx, t)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	slotExists := func() bool {
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walbox'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	}
	env := []string{
		"WALBOX_PG_DSN=" + pg.DSN("postgres"),
		"WALBOX_KAFKA_BROKERS=" + kfakeBrokers(t)[0],
		"WALBOX_STATUS_INTERVAL=200ms",
		"WALBOX_METRICS_ADDR=127.0.0.1:0",
		"WALBOX_LOG_LEVEL=info",
		"WALBOX_LOG_FORMAT=text",
		"WALBOX_RECONNECT_BACKOFF_MIN=100ms",
		"WALBOX_RECONNECT_BACKOFF_MAX=1s",
	}

	// First start: walbox creates the publication and the slot.
	p := startWalbox(t, env)
	waitUntil(ctx, t, time.Minute, "the first start's slot", func() bool { return strings.Contains(p.stderr.String(), "slot ready") })
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("first walbox exited %d", code)
	}

	// The slot vanishes while walbox is stopped; 200 events are committed.
	waitUntil(ctx, t, 30*time.Second, "the slot to be released", func() bool {
		var active bool
		_ = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'walbox'").Scan(&active)
		return !active
	})
	exec("SELECT pg_drop_replication_slot('walbox')")
	exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
	      SELECT 'order', g::text, 'OrderCreated', '{}' FROM generate_series(1, 200) g`)

	r := runWalboxToExit(t, env, nil, time.Minute)
	if r.code != 2 {
		t.Errorf("walbox after the slot vanished exited %d, want 2", r.code)
	}
	for _, s := range []string{`--slot "walbox" (WALBOX_SLOT, YAML key slot)`, `slot "walbox" does not exist, but publication "walbox" does`, "--create-slot", "NOT streamed", "re-publish"} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not mention %q:\n%s", s, r.stderr)
		}
	}
	if slotExists() {
		t.Fatal("walbox created a slot although it refused to start")
	}

	// The operator acknowledges with --create-slot.
	p = startWalbox(t, append(env, "WALBOX_CREATE_SLOT=true"))
	waitUntil(ctx, t, time.Minute, "the slot created with --create-slot", func() bool { return strings.Contains(p.stderr.String(), "slot ready") })
	if !strings.Contains(p.stderr.String(), "remove --create-slot") {
		t.Errorf("no warning about leaving --create-slot set:\n%s", p.stderr.Tail(4000))
	}
	if !slotExists() {
		t.Error("--create-slot did not create the slot")
	}
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox with --create-slot exited %d", code)
	}
}

// TestVanishedSlotRecoveryWhileLagging runs the re-publish step of
// docs/slots.md ("If the slot vanished") as written, with walbox behind:
// a writer commits while walbox streams runbookLag behind (lag_test.go);
// walbox is killed with the delayed stream lost, the slot is dropped, the
// writer goes on a moment and stops; walbox starts with --create-slot and
// the documented statement re-inserts the rows from the newest record
// timestamp received minus the margin read from walbox's metrics. Every
// row reaches Kafka, at least once, in per-aggregate order. With the
// produce time as the timestamp and no margin, as the procedure said
// before, the rows committed in the last lag before the stop were never
// sent.
func TestVanishedSlotRecoveryWhileLagging(t *testing.T) {
	fulltest.Require(t, "the vanished-slot runbook while walbox lags (about 16 s); the short run lags the failover runbook")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg, conn := startOutboxPostgres(ctx, t)
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	exec(`ALTER TABLE public.outbox ADD COLUMN pos bigserial`)
	brokers := kfakeBrokers(t)
	lag := startLag(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(pg.Port())))
	metricsAddr := freeAddr(t)
	env := []string{
		fmt.Sprintf("WALBOX_PG_DSN=postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", lag.Port()),
		"WALBOX_KAFKA_BROKERS=" + brokers[0],
		"WALBOX_STATUS_INTERVAL=200ms",
		"WALBOX_LOG_LEVEL=info",
		"WALBOX_LOG_FORMAT=text",
		"WALBOX_RECONNECT_BACKOFF_MIN=100ms",
		"WALBOX_RECONNECT_BACKOFF_MAX=1s",
	}
	col := startCollector(ctx, t, brokers)
	p := startWalbox(t, append(env, "WALBOX_METRICS_ADDR="+metricsAddr))
	waitUntil(ctx, t, time.Minute, "walbox to stream", func() bool { return strings.Contains(p.stderr.String(), "msg=streaming") })
	w := startWriter(ctx, t, pg.DSN("postgres"), 26, 30, 10, 200_000, 20*time.Millisecond)
	waitUntil(ctx, t, 2*time.Minute, "walbox to deliver the first 300 events", func() bool { return col.distinct() >= 300 })
	lagging(ctx, t, lag, metricsAddr)
	margin := runbookMargin(ctx, t, metricsAddr)

	// walbox dies with its stream behind, which is lost; the slot is
	// dropped while the writer goes on.
	p.kill()
	lag.CloseAll()
	lag.SetLatency(0)
	waitUntil(ctx, t, 30*time.Second, "the slot to be released", func() bool {
		var active bool
		_ = conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = 'walbox'").Scan(&active)
		return !active
	})
	exec("SELECT pg_drop_replication_slot('walbox')")
	count := func() int { evs, _ := w.snapshot(); return len(evs) }
	atDrop := count()
	waitUntil(ctx, t, time.Minute, "200 more events after the drop", func() bool { return count() >= atDrop+200 })
	w.halt()
	written, werr := w.snapshot()
	if werr != nil {
		t.Fatalf("writer: %v", werr)
	}

	// The recovery as docs/slots.md gives it: step 1, then step 2.
	p = startWalbox(t, append(env, "WALBOX_CREATE_SLOT=true"))
	waitUntil(ctx, t, time.Minute, "walbox with --create-slot to stream", func() bool { return strings.Contains(p.stderr.String(), "msg=streaming") })
	sql := fillRunbook(docBlock(t, "../docs/slots.md", "## If the slot vanished", "sql"), newestTimestamp(col.snapshot()), margin)
	t.Logf("re-publish: %s", sql)
	exec(sql)
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline) && outboxtest.DistinctIDs(col.snapshot()) < len(written); {
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	rep := outboxtest.Check(written, col.snapshot())
	t.Logf("written %d, margin %s, report %v", len(written), margin, rep)
	if !rep.OK() {
		t.Fatalf("after the re-publish: %v", rep)
	}
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox after the recovery exited %d", code)
	}
}
