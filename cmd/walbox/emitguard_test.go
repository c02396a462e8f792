package main

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/slotctl"
)

// TestEmitGuardWhileRunning: the forgery guard of --message-prefix used to
// run once at start, so a GRANT ... TO PUBLIC made while walbox ran let any
// role forge events from then on. Now a running walbox checks again and
// stops on it.
func TestEmitGuardWhileRunning(t *testing.T) {
	e := newSetupEnv(t, "004_emit_message_privilege.sql")
	e.cfg.MessagePrefix = "outbox"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- watchEmitPrivilege(ctx, e.cfg, 20*time.Millisecond, slog.New(slog.NewTextHandler(e.logs, nil)))
	}()
	time.Sleep(100 * time.Millisecond) // a few checks pass first; not synchronisation
	select {
	case err := <-done:
		t.Fatalf("the guard stopped while PUBLIC may not emit: %v", err)
	default:
	}
	e.exec(t, `DO $$ DECLARE f regprocedure; BEGIN
		FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' LOOP
			EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO PUBLIC', f);
		END LOOP; END $$`)
	select {
	case err := <-done:
		if !errors.Is(err, slotctl.ErrEmitMessagePublic) {
			t.Fatalf("guard = %v, want ErrEmitMessagePublic", err)
		}
	case <-ctx.Done():
		t.Fatal("a running walbox did not notice that PUBLIC may emit messages again")
	}

	// With --message-prefix-allow-public it keeps running (warned at start).
	e.cfg.MessagePrefixAllowPublic = true
	actx, acancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer acancel()
	if err := watchEmitPrivilege(actx, e.cfg, 20*time.Millisecond, slog.New(slog.DiscardHandler)); err != nil {
		t.Errorf("guard with --message-prefix-allow-public = %v, want nil", err)
	}
}

// TestEmitGuardOwnRole: the old heartbeat advice, GRANT outbox_writer TO
// walbox, lets the relay's own credentials forge events; a walbox whose
// role may emit messages now says so.
func TestEmitGuardOwnRole(t *testing.T) {
	e := newSetupEnv(t, "003_walbox_role.sql", "004_emit_message_privilege.sql")
	e.exec(t, "GRANT outbox_writer TO walbox")
	cfg := e.cfg
	cfg.MessagePrefix = "outbox"
	cfg.PGDSN = strings.Replace(cfg.PGDSN, "postgres@", "walbox@", 1)
	logs := &logbuf.Buffer{}
	if err := checkEmitOnce(context.Background(), cfg, true, slog.New(slog.NewTextHandler(logs, nil))); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "walbox's own role may execute pg_logical_emit_message") || !strings.Contains(logs.String(), "role=walbox") {
		t.Errorf("no warning about walbox's own role:\n%s", logs)
	}
	e.exec(t, "REVOKE outbox_writer FROM walbox")
	logs.Reset()
	if err := checkEmitOnce(context.Background(), cfg, true, slog.New(slog.NewTextHandler(logs, nil))); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "own role") {
		t.Errorf("warning without the privilege:\n%s", logs)
	}
}

// TestReplayChecksEmitPrivilege: `walbox replay --message-prefix` routes the
// messages of its range like `walbox run`, but ran no forgery guard at all.
func TestReplayChecksEmitPrivilege(t *testing.T) {
	e := newSetupEnv(t)
	e.cfg.MessagePrefix = "outbox"
	err := runReplay(context.Background(), e.cfg, replayOptions{DryRun: true}, pipeline.Range{}, e.rt, io.Discard, io.Discard)
	if !errors.Is(err, slotctl.ErrEmitMessagePublic) {
		t.Fatalf("replay --message-prefix on a default server = %v, want ErrEmitMessagePublic", err)
	}
}
