package retention_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/retention"
)

// TestKeeperExplainsAnInvalidationDuringARun: the server invalidates the
// trailing slot (max_slot_wal_keep_size) while the keeper runs. Every
// retry from then on logs the reason and the fix, and
// walbox_replay_slot_wal_status says lost.
//
// Regression (issue #17 item 3): only the first start's check explained
// an invalidated slot; during a run the keeper logged a bare "cannot be
// advanced (SQLSTATE 55000)" every minute, or, while it had no target yet,
// nothing at all.
func TestKeeperExplainsAnInvalidationDuringARun(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		testKeeperExplainsAnInvalidation(t, pgtest.Start(t, pgtest.WithBinDir(v.BinDir), pgtest.WithSetting("max_slot_wal_keep_size", "32MB")))
	})
}

func testKeeperExplainsAnInvalidation(t *testing.T, srv *pgtest.Server) {
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	e := env{dsn: srv.DSN("postgres"), conn: conn, live: "live", tr: "live_replay"}
	e.exec(t, `CREATE TABLE w (v int)`)
	e.exec(t, `SELECT pg_create_logical_replication_slot('live', 'pgoutput')`)

	var logs logbuf.Buffer
	reg := prometheus.NewRegistry()
	cc, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	var confirmed pglogrepl.LSN
	k, err := retention.New(retention.Config{Slot: e.live, ReplaySlot: e.tr, Window: time.Hour, Interval: 20 * time.Millisecond, RetryDelay: 20 * time.Millisecond},
		cc, func() pglogrepl.LSN { return pglogrepl.LSN(atomicLoad(&confirmed)) }, reg, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- k.Run(rctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	waitFor(t, func() bool { return strings.Contains(logs.String(), "created the trailing slot") })

	// As in TestMaxSlotWALKeepSizeInvalidatesTrailingSlot: the live slot
	// keeps up, the trailing one is held for the window.
	for range 5 {
		e.write(t)
		for range 2 {
			e.exec(t, `CHECKPOINT`)
			lsn := e.write(t)
			e.confirmLive(t, lsn)
			atomicStore(&confirmed, lsn)
		}
		e.exec(t, `SELECT pg_switch_wal()`)
	}
	e.confirmLive(t, e.write(t))
	e.exec(t, `CHECKPOINT`)
	var status string
	if err := conn.QueryRow(ctx, `SELECT wal_status FROM pg_replication_slots WHERE slot_name = $1`, e.tr).Scan(&status); err != nil {
		t.Fatal(err)
	}
	if status != "lost" {
		t.Fatalf("trailing slot wal_status %q, want lost", status)
	}

	const retry = "could not keep the trailing slot"
	waitFor(t, func() bool { return logs.Count(retry) >= 1 })
	logs.Reset() // a retry line may have been cut in half
	waitFor(t, func() bool { return logs.Count(retry) >= 4 })
	for _, line := range strings.Split(logs.String(), "\n") {
		if !strings.Contains(line, retry) {
			continue
		}
		if !strings.Contains(line, "slotctl drop --slot live_replay") || !strings.Contains(line, "max_slot_wal_keep_size") {
			t.Errorf("a retry after the invalidation does not say why or what to do:\n%s", line)
		}
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP walbox_replay_slot_wal_status The trailing (replay) slot's pg_replication_slots.wal_status: 1 for the current one, 0 for the others; all 0 until read.
# TYPE walbox_replay_slot_wal_status gauge
walbox_replay_slot_wal_status{status="extended"} 0
walbox_replay_slot_wal_status{status="lost"} 1
walbox_replay_slot_wal_status{status="reserved"} 0
walbox_replay_slot_wal_status{status="unreserved"} 0
`), "walbox_replay_slot_wal_status"); err != nil {
		t.Error(err)
	}
}
