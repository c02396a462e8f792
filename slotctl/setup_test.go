package slotctl_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// The router is what `walbox run` and `slotctl create` pass as Columns.
var _ slotctl.ColumnChecker = (*router.Router)(nil)

// columnsSeen records what Preflight hands a ColumnChecker.
type columnsSeen struct {
	table   string
	columns []string
	err     error
}

func (c *columnsSeen) CheckColumns(table string, columns []string) error {
	c.table, c.columns = table, columns
	return c.err
}

// TestEnsureChecksColumns: the column check moved from `walbox run` into
// Preflight, so `slotctl create` catches a missing column too, before
// anything is created.
func TestEnsureChecksColumns(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql")
	ctx := ctxT(t)
	e.exec(t, "ALTER TABLE public.outbox DROP COLUMN headers")

	seen := &columnsSeen{}
	if _, err := slotctl.Preflight(ctx, e.conn, slotctl.Config{Columns: seen}); err != nil {
		t.Fatalf("Preflight() = %v", err)
	}
	want := []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "created_at"}
	if seen.table != "public.outbox" || !slices.Equal(seen.columns, want) {
		t.Errorf("CheckColumns(%q, %q), want (public.outbox, %q)", seen.table, seen.columns, want)
	}

	rt, err := router.New(router.Config{Columns: router.Columns{Payload: "body"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := slotctl.Config{Slot: e.db, CreateMissing: true, Columns: rt}
	_, _, err = slotctl.Ensure(ctx, e.conn, cfg)
	if err == nil || !strings.Contains(err.Error(), `"body"`) || !strings.Contains(err.Error(), "--column-payload") {
		t.Fatalf("Ensure() with a missing payload column = %v, want the router's error naming it", err)
	}
	if _, err := slotctl.InspectPublication(ctx, e.conn, "walbox"); !errors.Is(err, slotctl.ErrPublicationNotFound) {
		t.Errorf("the publication was created despite the missing column (%v)", err)
	}
}

func setupOptions(log *logbuf.Buffer) slotctl.SetupOptions {
	return slotctl.SetupOptions{
		Logger:    slog.New(slog.NewTextHandler(log, nil)),
		Retryable: pipeline.IsRetryable,
		Backoff:   func(int) time.Duration { return 50 * time.Millisecond },
	}
}

// TestSetupWaitsForPostgres: Postgres down at start is retried (it may come
// up after walbox); once up, Setup prepares everything.
func TestSetupWaitsForPostgres(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t)
	e := newEnv(t, srv, "001_outbox.sql")
	ctx := ctxT(t)
	if err := srv.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	log := &logbuf.Buffer{}
	type result struct {
		slot slotctl.SlotInfo
		err  error
	}
	done := make(chan result, 1)
	go func() {
		_, slot, err := slotctl.Setup(ctx, srv.DSN(e.db), slotctl.Config{Slot: "walbox", CreateOnFirstStart: true}, setupOptions(log))
		done <- result{slot, err}
	}()
	for deadline := time.Now().Add(20 * time.Second); strings.Count(log.String(), "postgres not reachable") < 2; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no retries logged within 20s; log:\n%s", log)
		}
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.slot.Name != "walbox" {
			t.Fatalf("Setup() = %+v, %v", r.slot, r.err)
		}
	case <-ctx.Done():
		t.Fatalf("Setup() did not return after Postgres came up; log:\n%s", log)
	}
	for _, s := range []string{"created the replication slot", "slot ready"} {
		if !strings.Contains(log.String(), s) {
			t.Errorf("log does not say %q:\n%s", s, log)
		}
	}
}

// TestSetupReturnsWhatAHumanMustFix: no retry for errors a retry cannot fix.
func TestSetupReturnsWhatAHumanMustFix(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql")
	tests := []struct {
		name    string
		dsn     string
		cfg     slotctl.Config
		wantErr error
		want    string
	}{
		{name: "no such database", dsn: e.srv.DSN(e.db + "_missing"), want: "3D000"},
		{name: "no such table", dsn: e.srv.DSN(e.db), cfg: slotctl.Config{Table: "nope"}, wantErr: slotctl.ErrTableNotFound},
		{name: "bad slot name", dsn: e.srv.DSN(e.db), cfg: slotctl.Config{Slot: "No-Such"}, wantErr: slotctl.ErrInvalidConfig},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			log := &logbuf.Buffer{}
			cfg := tt.cfg
			cfg.CreateOnFirstStart = true
			_, _, err := slotctl.Setup(ctxT(t), tt.dsn, cfg, setupOptions(log))
			if err == nil || (tt.wantErr != nil && !errors.Is(err, tt.wantErr)) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Setup() = %v, want %v %q", err, tt.wantErr, tt.want)
			}
			if strings.Contains(log.String(), "retrying") {
				t.Errorf("retried an error a human must fix:\n%s", log)
			}
		})
	}
}

// TestSetupStopsWithContext: while Postgres stays unreachable, Setup
// returns once ctx ends, with an error wrapping ctx's.
func TestSetupStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	// Port 1 on loopback: nothing listens there, the connection is refused.
	_, _, err := slotctl.Setup(ctx, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?connect_timeout=1", 1),
		slotctl.Config{CreateOnFirstStart: true}, setupOptions(&logbuf.Buffer{}))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Setup() = %v, want it to wrap context.DeadlineExceeded", err)
	}
}
