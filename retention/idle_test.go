package retention_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/slotctl"
)

// TestIdleTimeoutInvalidatesTrailingSlot: PostgreSQL 18 invalidates a slot
// that stayed inactive longer than idle_replication_slot_timeout, and the
// trailing slot is inactive between the keeper's advances (and all the
// while walbox is stopped). EnsureSlot and walbox replay then report
// ErrSlotLost naming that setting and its fix, not max_slot_wal_keep_size,
// which has nothing to do with it.
func TestIdleTimeoutInvalidatesTrailingSlot(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		if v.Major < 18 {
			t.Logf("nothing to test: idle_replication_slot_timeout exists from PostgreSQL 18, this is %d", v.Major)
			return
		}
		srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir), pgtest.WithSetting("idle_replication_slot_timeout", "1s"))
		ctx := ctxT(t)
		conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		e := env{dsn: srv.DSN("postgres"), conn: conn, live: "live", tr: "live_replay"}
		e.exec(t, `CREATE TABLE w (v int)`)
		e.exec(t, `SELECT pg_create_logical_replication_slot('live', 'pgoutput')`)
		if _, _, err := retention.EnsureSlot(ctx, conn, e.live, e.tr); err != nil {
			t.Fatal(err)
		}
		// The server checks the timeout at checkpoints: checkpoint until
		// it has invalidated the trailing slot.
		var reason string
		deadline := time.Now().Add(20 * time.Second)
		for reason == "" {
			if time.Now().After(deadline) {
				t.Fatal("the idle trailing slot was not invalidated within 20s with idle_replication_slot_timeout = 1s")
			}
			e.write(t)
			e.exec(t, `CHECKPOINT`)
			if err := conn.QueryRow(ctx, `SELECT COALESCE(invalidation_reason, '') FROM pg_replication_slots WHERE slot_name = $1`, e.tr).Scan(&reason); err != nil {
				t.Fatal(err)
			}
			time.Sleep(100 * time.Millisecond) // polling interval
		}
		if reason != "idle_timeout" {
			t.Fatalf("invalidation_reason %q, want idle_timeout", reason)
		}
		_, _, err = retention.EnsureSlot(ctx, conn, e.live, e.tr)
		if !errors.Is(err, slotctl.ErrSlotLost) || !strings.Contains(err.Error(), "idle_replication_slot_timeout") || strings.Contains(err.Error(), "max_slot_wal_keep_size") {
			t.Errorf("EnsureSlot on an idle-timed-out trailing slot: %v\nwant ErrSlotLost naming idle_replication_slot_timeout, not max_slot_wal_keep_size", err)
		}
		_, err = pipeline.Replay(ctx, pipeline.ReplayConfig{ConnString: e.dsn, Publication: "p", Slot: e.tr, DryRun: true,
			Range: pipeline.Range{FromLSN: 1}}, nil, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
		if !errors.Is(err, slotctl.ErrSlotLost) || !strings.Contains(err.Error(), "idle_replication_slot_timeout") || strings.Contains(err.Error(), "max_slot_wal_keep_size") {
			t.Errorf("replay from an idle-timed-out trailing slot: %v\nwant ErrSlotLost naming idle_replication_slot_timeout, not max_slot_wal_keep_size", err)
		}
	})
}
