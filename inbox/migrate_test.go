package inbox_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/walbox/walbox/inbox"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestMigrationFileAsIs: the embedded files, applied in order as psql would
// (one simple-protocol string each), create the default table, twice
// without error, and an Inbox with the defaults works on it.
func TestMigrationFileAsIs(t *testing.T) {
	srv := shared.Server(t)
	dsn := srv.DSN(pgtest.NewDatabase(t, srv))
	conn := connect(t, dsn)
	for range 2 {
		for _, f := range []string{"migrations/001_inbox.sql", "migrations/002_inbox_source.sql"} {
			sql, err := inbox.Migrations.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx(t), string(sql)); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	ib, err := inbox.New(inbox.Config{Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ib.Process(ctx(t), conn, record("e-1", 0), noop); err != nil {
		t.Fatal(err)
	}
}

// TestMigrateCustomTable: Migrate creates a table of another name, with its
// index named after it, idempotently; Cleanup and Process use it.
func TestMigrateCustomTable(t *testing.T) {
	srv := shared.Server(t)
	dsn := srv.DSN(pgtest.NewDatabase(t, srv))
	conn := connect(t, dsn)
	if _, err := conn.Exec(ctx(t), `CREATE SCHEMA "App"`); err != nil {
		t.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Consumer: "c", Table: "App.Inbox"})
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := ib.Migrate(ctx(t), conn); err != nil {
			t.Fatal(err)
		}
	}
	var idx string
	if err := conn.QueryRow(ctx(t), `SELECT indexname FROM pg_indexes WHERE schemaname = 'App' AND tablename = 'Inbox' AND indexdef LIKE '%received_at%'`).Scan(&idx); err != nil {
		t.Fatalf("the cleanup index: %v", err)
	}
	if idx != "Inbox_received_at_idx" {
		t.Fatalf("index %q, want Inbox_received_at_idx", idx)
	}
	var other int
	if err := conn.QueryRow(ctx(t), `SELECT count(*) FROM pg_tables WHERE tablename = 'walbox_inbox'`).Scan(&other); err != nil || other != 0 {
		t.Fatalf("default table created too (%d, %v)", other, err)
	}
	if applied, err := ib.Process(ctx(t), conn, record("e-1", 0), noop); err != nil || !applied {
		t.Fatalf("Process: %v, %v", applied, err)
	}
	if n := inboxRows(t, conn, `"App"."Inbox"`, "c"); n != 1 {
		t.Fatalf("%d rows in App.Inbox, want 1", n)
	}
}

// TestMissingTableSaysSo: Handle on a database without the table names
// the fix.
func TestMissingTableSaysSo(t *testing.T) {
	srv := shared.Server(t)
	conn := connect(t, srv.DSN(pgtest.NewDatabase(t, srv)))
	ib, err := inbox.New(inbox.Config{Consumer: "c"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = ib.Process(ctx(t), conn, record("e-1", 0), noop)
	if err == nil || !containsAll(err.Error(), "inbox public.walbox_inbox", "Migrate or the files of inbox/migrations", "does not exist") {
		t.Fatalf("Process on a database without the table: %v", err)
	}
}

// TestCleanup: Cleanup deletes exactly this consumer's rows older than the
// retention, in batches, and returns the count; an event whose row was
// deleted is applied again if delivered again, which is why the retention
// must exceed every redelivery window.
func TestCleanup(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)
	other, err := inbox.New(inbox.Config{Consumer: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 25 {
		if _, err := e.ib.Process(ctx(t), conn, record(fmt.Sprintf("e-%d", i), int64(i)), deposit(1)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		if _, err := other.Process(ctx(t), conn, record(fmt.Sprintf("e-%d", i), int64(i)), deposit(1)); err != nil {
			t.Fatal(err)
		}
	}
	// 20 of billing's rows and all of shipping's are two hours old.
	if _, err := conn.Exec(ctx(t), `UPDATE walbox_inbox SET received_at = now() - interval '2 hours'
		WHERE consumer = 'shipping' OR (consumer = 'billing' AND substr(event_id, 3)::int < 20)`); err != nil {
		t.Fatal(err)
	}
	n, err := e.ib.Cleanup(ctx(t), conn, time.Hour, 7)
	if err != nil || n != 20 {
		t.Fatalf("Cleanup = %d, %v; want 20", n, err)
	}
	if b, s := inboxRows(t, conn, "walbox_inbox", "billing"), inboxRows(t, conn, "walbox_inbox", "shipping"); b != 5 || s != 3 {
		t.Fatalf("left billing %d, shipping %d; want 5 and 3", b, s)
	}
	if n, err := e.ib.Cleanup(ctx(t), conn, time.Hour, 0); err != nil || n != 0 {
		t.Fatalf("second Cleanup = %d, %v; want 0", n, err)
	}
	// A copy of e-0 arriving after its row was deleted is applied again.
	if applied, err := e.ib.Process(ctx(t), conn, record("e-0", 0), deposit(1)); err != nil || !applied {
		t.Fatalf("late copy after cleanup: %v, %v; want applied (the retention was too short)", applied, err)
	}
	for _, bad := range []struct {
		older time.Duration
		batch int
	}{{0, 10}, {-time.Hour, 10}, {time.Hour, -1}} {
		if _, err := e.ib.Cleanup(ctx(t), conn, bad.older, bad.batch); !errors.Is(err, inbox.ErrInvalidConfig) {
			t.Errorf("Cleanup(%s, %d): %v, want ErrInvalidConfig", bad.older, bad.batch, err)
		}
	}
}
