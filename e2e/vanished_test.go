package e2e

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"
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
