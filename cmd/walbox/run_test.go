package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// setupEnv is a database with the outbox, and the configuration and router
// `walbox run` would build for it.
type setupEnv struct {
	conn *pgx.Conn // superuser
	cfg  config.Config
	rt   *router.Router
	logs *logbuf.Buffer
}

func newSetupEnv(t *testing.T, migrationFiles ...string) *setupEnv {
	t.Helper()
	srv := pgtest.Start(t)
	db := pgtest.NewDatabase(t, srv)
	conn, err := pgx.Connect(ctxT(t), srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	e := &setupEnv{conn: conn, logs: &logbuf.Buffer{}}
	for _, f := range append([]string{"001_outbox.sql"}, migrationFiles...) {
		e.migrate(t, f)
	}
	e.cfg = config.Defaults()
	e.cfg.PGDSN = srv.DSN(db)
	e.cfg.LogFormat = "text"
	e.cfg.ReconnectBackoffMin, e.cfg.ReconnectBackoffMax = 50*time.Millisecond, 200*time.Millisecond
	if e.rt, err = router.New(router.Config{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *setupEnv) migrate(t *testing.T, name string) {
	t.Helper()
	sql, err := migrations.FS.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.conn.Exec(ctxT(t), string(sql)); err != nil {
		t.Fatalf("apply migrations/%s: %v", name, err)
	}
}

func (e *setupEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.conn.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// setup runs the slot setup of `walbox run` with e.cfg.
func (e *setupEnv) setup(t *testing.T) (slotctl.SlotInfo, error) {
	t.Helper()
	return setupSlot(ctxT(t), e.cfg, e.rt, newLogger(e.cfg, e.logs))
}

func (e *setupEnv) slotExists(t *testing.T) bool {
	t.Helper()
	_, err := slotctl.Inspect(ctxT(t), e.conn, e.cfg.Slot)
	if err != nil && !errors.Is(err, slotctl.ErrSlotNotFound) {
		t.Fatal(err)
	}
	return err == nil
}

// TestRunRefusesVanishedSlot is issue 7's reproduction: walbox stopped, its
// slot dropped (or lost in a failover), 200 events committed, walbox started
// again. It used to create a new slot at "now" (CreateMissing: true on every
// start) and log only "slot ready": the 200 events were never sent. Now it
// refuses, saying what happened and how to recover; with --create-slot it
// creates the slot, and the advised re-publishing streams the 200 events.
func TestRunRefusesVanishedSlot(t *testing.T) {
	e := newSetupEnv(t)

	// First start: creates the publication and the slot.
	if _, err := e.setup(t); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if !strings.Contains(e.logs.String(), "created the replication slot") {
		t.Errorf("first start did not log the slot's creation:\n%s", e.logs)
	}
	// Restart with everything in place.
	if _, err := e.setup(t); err != nil {
		t.Fatalf("second start: %v", err)
	}

	// walbox is stopped; the slot vanishes; events are committed.
	e.exec(t, "SELECT pg_drop_replication_slot($1)", e.cfg.Slot)
	var since time.Time
	if err := e.conn.QueryRow(ctxT(t), "SELECT clock_timestamp()").Scan(&since); err != nil {
		t.Fatal(err)
	}
	e.exec(t, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
	           SELECT 'order', g::text, 'OrderCreated', '{}' FROM generate_series(1, 200) g`)

	_, err := e.setup(t)
	if !errors.Is(err, slotctl.ErrSlotVanished) {
		t.Fatalf("start after the slot vanished = %v, want ErrSlotVanished", err)
	}
	for _, s := range []string{`slot "walbox" does not exist, but publication "walbox" does`, "failover", "dropped",
		"NOT streamed", "--create-slot", "re-publish", "event_id", "walbox replay --from-table"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if e.slotExists(t) {
		t.Fatal("a slot was created although the start was refused")
	}

	// The operator acknowledges with --create-slot.
	e.cfg.CreateSlot = true
	if _, err := e.setup(t); err != nil {
		t.Fatalf("start with --create-slot: %v", err)
	}
	if !e.slotExists(t) {
		t.Fatal("--create-slot did not create the slot")
	}
	if logs := e.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "remove --create-slot") {
		t.Errorf("creating the slot with --create-slot logged no warning:\n%s", logs)
	}

	// The recovery the error advises: re-publish the rows committed since
	// the last event received, in one statement.
	e.exec(t, `WITH moved AS (DELETE FROM public.outbox WHERE created_at >= $1 RETURNING *)
	           INSERT INTO public.outbox SELECT * FROM moved ORDER BY created_at, id`, since)
	var inserts int
	if err := e.conn.QueryRow(ctxT(t), `SELECT count(*) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', 'walbox') WHERE get_byte(data, 0) = ascii('I')`, e.cfg.Slot).Scan(&inserts); err != nil {
		t.Fatal(err)
	}
	if inserts != 200 {
		t.Errorf("the new slot streams %d re-published inserts, want 200", inserts)
	}
}

// TestRunMessagePrefixPrivilege: with --message-prefix, walbox refuses to
// start while PUBLIC may execute pg_logical_emit_message (any role could
// forge events), unless --message-prefix-allow-public; migration 004 fixes
// it. Before issue 7 nothing was checked.
func TestRunMessagePrefixPrivilege(t *testing.T) {
	e := newSetupEnv(t)
	e.cfg.MessagePrefix = "outbox"

	_, err := e.setup(t)
	if !errors.Is(err, slotctl.ErrEmitMessagePublic) {
		t.Fatalf("start with --message-prefix on a default server = %v, want ErrEmitMessagePublic", err)
	}
	for _, s := range []string{"REVOKE EXECUTE ON FUNCTION", "FROM PUBLIC", "GRANT EXECUTE", "004_emit_message_privilege.sql", "--message-prefix-allow-public"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if e.slotExists(t) {
		t.Error("a slot was created although the start was refused")
	}

	e.cfg.MessagePrefixAllowPublic = true
	if _, err := e.setup(t); err != nil {
		t.Fatalf("start with --message-prefix-allow-public: %v", err)
	}
	if logs := e.logs.String(); !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "--message-prefix-allow-public") {
		t.Errorf("no warning logged with --message-prefix-allow-public:\n%s", logs)
	}

	e.migrate(t, "004_emit_message_privilege.sql")
	e.cfg.MessagePrefixAllowPublic = false
	e.logs.Reset()
	if _, err := e.setup(t); err != nil {
		t.Fatalf("start after migration 004: %v", err)
	}
	if strings.Contains(e.logs.String(), "level=WARN") {
		t.Errorf("warning logged after migration 004:\n%s", e.logs)
	}

	// Without message routing there is nothing to check.
	e.exec(t, "GRANT EXECUTE ON FUNCTION pg_logical_emit_message(boolean, text, text) TO PUBLIC")
	e.cfg.MessagePrefix = ""
	if _, err := e.setup(t); err != nil {
		t.Fatalf("start without --message-prefix: %v", err)
	}
}

// TestRunChecksColumns: a routing option naming a column the table lacks
// stops the start (the check now lives in slotctl.Preflight).
func TestRunChecksColumns(t *testing.T) {
	e := newSetupEnv(t)
	e.exec(t, "ALTER TABLE public.outbox RENAME COLUMN aggregate_id TO agg_id")
	_, err := e.setup(t)
	if err == nil || !strings.Contains(err.Error(), `"aggregate_id"`) || !strings.Contains(err.Error(), "agg_id") {
		t.Fatalf("start with a missing column = %v, want an error naming it and the table's columns", err)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
