package heartbeat

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestHotStandbyServer: against a hot standby every tick used to fail (the
// slot's lag reads pg_current_wal_lsn(), which errors during recovery, and
// the emit is refused) with a warning per tick, while
// walbox_heartbeat_lag_seconds read a healthy 0. Now the recovery is said
// once, the slot's lag is read against the replayed position, and the
// heartbeat lag grows: it cannot be measured, so it is not reported as
// healthy. Once promoted, heartbeats flow again and the lag is a round trip.
func TestHotStandbyServer(t *testing.T) {
	primary := pgtest.Start(t)
	standby := pgtest.Standby(t, primary, pgtest.StandbyOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, standby.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// A slot of that name on the standby, so that the lag query runs.
	if _, err := conn.Exec(ctx, `SELECT pg_create_physical_replication_slot('walbox', true)`); err != nil {
		t.Fatal(err)
	}
	cc, err := pgx.ParseConfig(standby.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	m, err := New(time.Second, "walbox", cc, func() bool { return true }, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if !m.tick(ctx, conn) {
			t.Fatalf("tick on a hot standby: connection unusable:\n%s", logs.String())
		}
	}
	out := logs.String()
	if n := strings.Count(out, "hot standby"); n != 1 {
		t.Errorf("the recovery was said %d times in 3 ticks, want once:\n%s", n, out)
	}
	if strings.Contains(out, "level=WARN msg=\"heartbeat: cannot") || strings.Contains(out, "emit failed") {
		t.Errorf("a tick failed on the hot standby:\n%s", out)
	}
	first := m.Lag()
	deadline := time.Now().Add(30 * time.Second)
	for m.Lag() <= first {
		if time.Now().After(deadline) {
			t.Fatalf("heartbeat lag on a hot standby stays at %s, want it to grow", m.Lag())
		}
		time.Sleep(10 * time.Millisecond) // polling interval
	}
	if first <= 0 {
		t.Errorf("heartbeat lag on a hot standby = %s, want more than 0 (unknown is not healthy)", first)
	}

	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if !m.tick(ctx, conn) {
		t.Fatal("tick after the promotion: connection unusable")
	}
	if !strings.Contains(logs.String(), "accepts writes again") {
		t.Errorf("the end of the recovery is not said:\n%s", logs.String())
	}
	if len(m.outstanding) != 1 {
		t.Fatalf("no heartbeat emitted after the promotion:\n%s", logs.String())
	}
	m.Seen(content(t, m.instance, m.outstanding[0].seq))
	if lag := m.Lag(); lag > 5*time.Second {
		t.Errorf("heartbeat lag after the promotion and a round trip = %s, want the round trip", lag)
	}
}

// TestStandbyForgetsOutstanding: an instance that lost the slot to another
// (now a walbox --standby) used to keep the heartbeats it emitted while
// active, which only the other instance receives, and reported an
// ever-growing lag. With WatchStandby the tick forgets them.
func TestStandbyForgetsOutstanding(t *testing.T) {
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	standby := false
	m, err := New(time.Second, "walbox", conn.Config(), func() bool { return !standby }, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	m.WatchStandby(func() bool { return standby })
	if !m.tick(ctx, conn) || len(m.outstanding) != 1 {
		t.Fatalf("active tick: outstanding %d, want 1", len(m.outstanding))
	}
	m.outstanding[0].at = time.Now().Add(-time.Hour) // emitted long ago, never seen
	standby = true
	if !m.tick(ctx, conn) {
		t.Fatal("standby tick: connection unusable")
	}
	if len(m.outstanding) != 0 || m.Lag() != 0 {
		t.Errorf("after losing the slot: outstanding %d, lag %s; want none and 0", len(m.outstanding), m.Lag())
	}
}
