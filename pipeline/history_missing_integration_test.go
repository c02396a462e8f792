package pipeline_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// promotedWithoutHistory is a promoted standby (timeline 2) whose
// 00000002.history was removed from pg_wal, as on a server restored or
// promoted without its WAL archive, with the outbox, publication and slot.
func promotedWithoutHistory(t *testing.T, ctx context.Context) (*pgtest.Server, *pgx.Conn) {
	t.Helper()
	primary := pgtest.Start(t)
	standby := pgtest.Standby(t, primary, pgtest.StandbyOptions{})
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, standby.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var tl int
	if err := conn.QueryRow(ctx, `SELECT timeline_id FROM pg_control_checkpoint()`).Scan(&tl); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, `SELECT timeline_id FROM pg_control_checkpoint()`).Scan(&tl); err != nil || tl != 2 {
		t.Fatalf("the promoted standby is on timeline %d (%v), want 2", tl, err)
	}
	if err := os.Remove(filepath.Join(standby.DataDir(), "pg_wal", "00000002.history")); err != nil {
		t.Fatal(err)
	}
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
	return standby, conn
}

// TestUnreadableTimelineHistory: on a server whose timeline history file is
// gone, at-least-once delivery goes on (nothing better is known) but warns,
// once, that a failover is then judged by timeline numbers only, naming the
// file to restore; it used to say nothing. Exactly-once stops with the same
// hint (it used to give the server's error alone).
func TestUnreadableTimelineHistory(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, conn := promotedWithoutHistory(t, ctx)
	const hint = "restore 00000002.history from the WAL archive into the server's pg_wal directory"

	t.Run("at least once", func(t *testing.T) {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		logs := &logbuf.Buffer{}
		log := slog.New(slog.NewTextHandler(logs, nil))
		reg := prometheus.NewRegistry()
		kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: cluster.ListenAddrs(), MaxBufferedRecords: 2001}, log, reg)
		if err != nil {
			t.Fatal(err)
		}
		defer kcl.Close()
		rt, err := router.New(router.Config{})
		if err != nil {
			t.Fatal(err)
		}
		relay, err := pipeline.New(pipeline.Config{ConnString: srv.DSN("postgres"), Slot: "walbox", Publication: "walbox",
			StatusInterval: 100 * time.Millisecond, MaxInflightRecords: 2000}, kcl, rt, reg, log)
		if err != nil {
			t.Fatal(err)
		}
		var start pglogrepl.LSN
		if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&start); err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(rctx, start) }()
		defer func() {
			rcancel()
			if err := <-done; err != nil {
				t.Errorf("relay: %v", err)
			}
		}()
		evs := outboxtest.NewGenerator(7, 3).Batch(5)
		if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
			t.Fatal(err)
		}
		var pos pglogrepl.LSN
		if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&pos); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "the slot confirmed past the events", func() bool {
			var c pglogrepl.LSN
			_ = conn.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&c)
			return c >= pos
		})
		// A second session reads the history again.
		if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'walbox' AND active_pid IS NOT NULL`); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 60*time.Second, "a second session", func() bool {
			return strings.Count(logs.String(), "msg=streaming ") >= 2
		})
		out := logs.String()
		if n := strings.Count(out, "the server's timeline history cannot be read"); n != 1 {
			t.Errorf("warned %d times about the unreadable history, want once:\n%s", n, logs.Tail(3000))
		}
		for _, want := range []string{"level=WARN", hint, "timeline=2", "00000002.history"} {
			if !strings.Contains(out, want) {
				t.Errorf("the log lacks %q:\n%s", want, logs.Tail(3000))
			}
		}
	})

	t.Run("exactly once", func(t *testing.T) {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
		if err != nil {
			t.Fatal(err)
		}
		defer cluster.Close()
		run := startEOSRelay(t, conn, srv.DSN("postgres"), cluster.ListenAddrs(), "walbox", "walbox-state-histmiss", nil)
		select {
		case err := <-run.done:
			if err == nil || !strings.Contains(err.Error(), hint) || !strings.Contains(err.Error(), "TIMELINE_HISTORY") {
				t.Fatalf("exactly-once relay ended with %v, want the history's error with %q", err, hint)
			}
		case <-time.After(60 * time.Second):
			run.cancel()
			<-run.done
			t.Fatal("the exactly-once relay kept running without the server's history")
		}
	})
}
