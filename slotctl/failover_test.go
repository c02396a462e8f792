package slotctl

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
)

// newestWithFailoverSlots starts the newest installed PostgreSQL 17+, or
// skips: the short suite's default version may be older.
func newestWithFailoverSlots(t *testing.T) *pgx.Conn {
	t.Helper()
	installed, err := pgtest.InstalledVersions()
	if err != nil || len(installed) == 0 || installed[len(installed)-1].Major < 17 {
		t.Skipf("failover slots need PostgreSQL 17 or newer (installed: %v, %v)", installed, err)
	}
	srv := pgtest.Start(t, pgtest.WithBinDir(installed[len(installed)-1].BinDir))
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, `CREATE TABLE outbox (id bigint PRIMARY KEY, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	return conn
}

// TestNonFailoverSlotIsReportedWithTheFix: an existing plain slot under
// --failover-slot is refused with the command that turns failover on and
// keeps its position, not with advice to drop it.
func TestNonFailoverSlotIsReportedWithTheFix(t *testing.T) {
	conn := newestWithFailoverSlots(t)
	ctx := context.Background()
	if err := EnsurePublication(ctx, conn, Config{Table: "outbox", CreateMissing: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := EnsureSlot(ctx, conn, Config{Table: "outbox", Slot: "plain", CreateMissing: true}); err != nil {
		t.Fatal(err)
	}
	_, err := Check(ctx, conn, Config{Table: "outbox", Slot: "plain", CreateMissing: true, Failover: true})
	if !errors.Is(err, ErrSlotMismatch) {
		t.Fatalf("plain slot under --failover-slot: %v, want ErrSlotMismatch", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "ALTER_REPLICATION_SLOT plain (FAILOVER true)") || strings.Contains(msg, "slotctl drop") {
		t.Fatalf("the error should give the ALTER_REPLICATION_SLOT fix and not advise dropping: %s", msg)
	}
	// The fix works, and then the slot is accepted.
	repl, err := pgx.Connect(ctx, conn.Config().ConnString()+"&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(ctx)
	if err := repl.PgConn().Exec(ctx, `ALTER_REPLICATION_SLOT plain (FAILOVER true)`).Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Check(ctx, conn, Config{Table: "outbox", Slot: "plain", CreateMissing: true, Failover: true}); err != nil {
		t.Fatalf("after ALTER_REPLICATION_SLOT: %v", err)
	}
}

// TestFailoverWarnsWithoutSynchronizedStandbySlots: a failover slot on a
// primary that sends changes before its standbys have them is warned about,
// in Check's plan too; once synchronized_standby_slots is set, not.
func TestFailoverWarnsWithoutSynchronizedStandbySlots(t *testing.T) {
	conn := newestWithFailoverSlots(t)
	ctx := context.Background()
	cfg := Config{Table: "outbox", Slot: "fo", CreateMissing: true, Failover: true}
	plan, err := Check(ctx, conn, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Warnings) != 1 || !strings.Contains(plan.Warnings[0], "synchronized_standby_slots is empty") {
		t.Fatalf("warnings %q, want one about synchronized_standby_slots", plan.Warnings)
	}
	if w, err := FailoverWarnings(ctx, conn, Config{Table: "outbox"}); err != nil || w != nil {
		t.Fatalf("without --failover-slot: %q, %v; want nothing", w, err)
	}
	for _, sql := range []string{
		`SELECT pg_create_physical_replication_slot('standby')`,
		`ALTER SYSTEM SET synchronized_standby_slots = 'standby'`,
		`SELECT pg_reload_conf()`,
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	// pg_reload_conf signals; a new session reads the new value for sure.
	c2, err := pgx.Connect(ctx, conn.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close(ctx)
	if w, err := FailoverWarnings(ctx, c2, cfg); err != nil || w != nil {
		t.Fatalf("with synchronized_standby_slots set: %q, %v; want nothing", w, err)
	}
}
