package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

// setupOn is setup on a server of the test's choosing.
func setupOn(t *testing.T, srv *pgtest.Server) (invocation, *pgx.Conn, string) {
	t.Helper()
	db := pgtest.NewDatabase(t, srv)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	sql, err := os.ReadFile(filepath.Join("..", "..", "migrations", "001_outbox.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, string(sql)); err != nil {
		t.Fatal(err)
	}
	return invocation{env: map[string]string{"WALBOX_PG_DSN": srv.DSN(db), "WALBOX_SLOT": db}}, conn, db
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// insertEvents commits one transaction inserting n outbox rows.
func insertEvents(t *testing.T, conn *pgx.Conn, n int) {
	t.Helper()
	mustExec(t, conn, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'o' || i, 'created', '{}' FROM generate_series(1, $1) i`, n)
}

func currentLSN(t *testing.T, conn *pgx.Conn) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := conn.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// slotNames lists the replication slots of the whole server.
func slotNames(t *testing.T, conn *pgx.Conn) []string {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT slot_name::text FROM pg_replication_slots ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// noCountingSlotLeft: CountEvents' temporary copies are gone once a
// command returns; the copy is temporary, so even a crash would not leave
// one (the server drops it with the session).
func noCountingSlotLeft(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	for _, n := range slotNames(t, conn) {
		if strings.HasPrefix(n, "slotctl_count_") {
			t.Errorf("temporary counting slot %s left behind", n)
		}
	}
}

func inspectSlot(t *testing.T, conn *pgx.Conn, name string) slotctl.SlotInfo {
	t.Helper()
	s, err := slotctl.Inspect(context.Background(), conn, name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// streamFrom makes slot active: a walsender streams it until the test ends.
func streamFrom(t *testing.T, dsn, slot string) {
	t.Helper()
	ctx := context.Background()
	repl, err := pgconn.Connect(ctx, dsn+"&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { repl.Close(context.Background()) })
	if err := pglogrepl.StartReplication(ctx, repl, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walbox'"},
	}); err != nil {
		t.Fatal(err)
	}
}

// TestSlotOperations runs list, advance, copy and drop's warning, and each
// of their refusals, on every installed PostgreSQL version (all have
// pg_copy_logical_replication_slot and pg_replication_slot_advance).
func TestSlotOperations(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		// A limit, so that safe_wal_size has a value.
		srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir), pgtest.WithSetting("max_slot_wal_keep_size", "1GB"))
		testSlotOperations(t, srv)
	})
}

func testSlotOperations(t *testing.T, srv *pgtest.Server) {
	in, conn, slot := setupOn(t, srv)
	in.run(t, "create").want(t, exitOK, nil, nil)
	var (
		replay  = slot + "_replay"
		decoder = slot + "_td"
		busy    = slot + "_busy"
		copied  = slot + "_copy"
	)
	mustExec(t, conn, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", replay)
	mustExec(t, conn, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", decoder)
	mustExec(t, conn, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", busy)
	streamFrom(t, in.env["WALBOX_PG_DSN"], busy)
	busyPID := inspectSlot(t, conn, busy).ActivePID
	if busyPID == 0 {
		t.Fatalf("slot %s is not active", busy)
	}

	// Events: 3 + 2 committed before the target, 4 after it.
	insertEvents(t, conn, 3)
	insertEvents(t, conn, 2)
	target := currentLSN(t, conn)
	insertEvents(t, conn, 4)
	const skipped, after = 5, 4
	start := inspectSlot(t, conn, slot).ConfirmedFlushLSN

	t.Run("list", func(t *testing.T) {
		r := in.run(t, "list")
		r.want(t, exitOK, []string{"NAME", "SAFE_WAL_SIZE", slot, replay, decoder, busy, "test_decoding", strconv.Itoa(busyPID),
			"walbox's slot " + slot + ": publication walbox, tables public.outbox",
			"walbox's trailing replay slot " + replay + ": publication walbox, tables public.outbox"}, nil)

		r = in.run(t, "list", "--json")
		r.want(t, exitOK, nil, nil)
		var got listReport
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("list --json: %v", err)
		}
		bySlot := map[string]listedSlotJSON{}
		for _, s := range got.Slots {
			bySlot[s.Name] = s
		}
		if len(got.Slots) != 4 {
			t.Errorf("list --json has %d slots, want 4 (%s, %s, %s, %s)", len(got.Slots), slot, replay, decoder, busy)
		}
		if s := bySlot[slot]; s.Walbox != "live" || s.Publication == nil || !slices.Equal(s.Publication.Tables, []string{"public.outbox"}) ||
			s.ConfirmedFlushLSN != start.String() || s.Active || s.RetainedBytes <= 0 || s.RetainedHuman == "" || s.WALStatus != "reserved" ||
			s.SafeWALSize == nil || *s.SafeWALSize <= 0 {
			t.Errorf("live slot = %+v", s)
		}
		if s := bySlot[replay]; s.Walbox != "replay" || s.Publication == nil {
			t.Errorf("replay slot = %+v", s)
		}
		if s := bySlot[decoder]; s.Plugin != "test_decoding" || s.Walbox != "" || s.Publication != nil {
			t.Errorf("test_decoding slot = %+v", s)
		}
		if s := bySlot[busy]; !s.Active || s.ActivePID != busyPID || s.ClientAddr != "127.0.0.1" || s.Walbox != "" {
			t.Errorf("active slot = %+v, want active pid %d from 127.0.0.1", s, busyPID)
		}
	})

	// A trailing slot named with --replay-slot (as walbox run was given) is
	// walbox's too; the default name then is not.
	t.Run("list with --replay-slot", func(t *testing.T) {
		trail := slot + "_trail"
		mustExec(t, conn, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", trail)
		defer mustExec(t, conn, "SELECT pg_drop_replication_slot($1)", trail)
		r := in.run(t, "list", "--json", "--replay-slot", trail)
		r.want(t, exitOK, nil, nil)
		var got listReport
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("list --json: %v", err)
		}
		marks := map[string]string{}
		for _, s := range got.Slots {
			marks[s.Name] = s.Walbox
		}
		if marks[trail] != "replay" || marks[replay] != "" || marks[slot] != "live" {
			t.Errorf("with --replay-slot %s: marks = %v, want %s replay, %s unmarked, %s live", trail, marks, trail, replay, slot)
		}
	})

	t.Run("advance refusals", func(t *testing.T) {
		in.run(t, "advance", "--to", "16-B374D848", "--yes").want(t, exitUsage, nil, []string{"16/B374D848", `"16-B374D848"`})
		in.run(t, "advance", "--yes").want(t, exitUsage, nil, []string{"--to LSN is required"})
		in.run(t, "advance", "--to", target.String()).want(t, exitUsage, nil, []string{"--yes", "not a terminal"})
		in.run(t, "advance", "--to", "0/1", "--yes").
			want(t, exitRefused, nil, []string{"backwards", "confirmed up to " + start.String()})
		in.run(t, "advance", "--slot", busy, "--to", target.String(), "--yes").
			want(t, exitRefused, nil, []string{"in use", fmt.Sprintf("server process %d", busyPID), "nothing was advanced"})
		invocation{env: in.env, tty: true, stdin: "no\n"}.run(t, "advance", "--to", target.String()).
			want(t, exitError, nil, []string{"skips", "5 outbox event(s)", `Type "` + slot + `" to confirm`, "nothing was advanced"})
		if got := inspectSlot(t, conn, slot).ConfirmedFlushLSN; got != start {
			t.Errorf("slot moved to %s by a refused advance, want %s", got, start)
		}
		noCountingSlotLeft(t, conn)
	})

	t.Run("copy", func(t *testing.T) {
		r := in.run(t, "copy", "--to", copied, "--json")
		r.want(t, exitOK, nil, []string{"holds WAL"})
		var got slotJSON
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("copy --json: %v", err)
		}
		c := inspectSlot(t, conn, copied)
		if got.Name != copied || got.ConfirmedFlushLSN != start.String() || c.ConfirmedFlushLSN != start || c.Plugin != "pgoutput" || c.Temporary {
			t.Errorf("copy = %+v (json %+v), want a permanent pgoutput slot at %s", c, got, start)
		}
		in.run(t, "copy", "--to", copied).want(t, exitError, nil, []string{"already exists", copied})
		in.run(t, "copy", "--to", "Bad-Name").want(t, exitUsage, nil, []string{`"Bad-Name"`})
		in.run(t, "copy").want(t, exitUsage, nil, []string{"--to NAME is required"})
	})

	t.Run("advance", func(t *testing.T) {
		// The copy first, with --json: it sits where the slot sits, so it
		// skips the same events.
		r := in.run(t, "advance", "--slot", copied, "--to", target.String(), "--yes", "--json")
		r.want(t, exitOK, nil, []string{"5 outbox event(s)"})
		var got advanceResult
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("advance --json: %v", err)
		}
		if got.Slot != copied || got.From != start.String() || got.To != target.String() || got.Requested != target.String() ||
			got.SkippedEvents == nil || *got.SkippedEvents != skipped || got.SkippedWALBytes != int64(target-start) || got.CountError != "" {
			t.Errorf("advance --json = %+v, want %d events skipped from %s to %s", got, skipped, start, target)
		}

		// Beyond the WAL end: the slot stops at the end slotctl saw, and
		// skips exactly the events committed after the target.
		r = in.run(t, "advance", "--slot", copied, "--to", "FFFF/0", "--yes", "--json")
		r.want(t, exitOK, nil, []string{"WAL ends at", fmt.Sprintf("%d outbox event(s)", after)})
		got = advanceResult{}
		if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
			t.Fatalf("advance --json: %v", err)
		}
		if c := inspectSlot(t, conn, copied); got.Requested != "FFFF/0" || got.To != c.ConfirmedFlushLSN.String() ||
			c.ConfirmedFlushLSN <= target || got.SkippedEvents == nil || *got.SkippedEvents != after {
			t.Errorf("advance --json past the WAL end = %+v, slot at %s", got, c.ConfirmedFlushLSN)
		}

		in.run(t, "advance", "--to", target.String(), "--yes").want(t, exitOK,
			[]string{fmt.Sprintf("advanced slot %s from %s to %s", slot, start, target)},
			[]string{fmt.Sprintf("skips %s of WAL and %d outbox event(s)", bytesIEC(int64(target-start)), skipped)})
		if got := inspectSlot(t, conn, slot).ConfirmedFlushLSN; got != target {
			t.Errorf("slot at %s after advance, want %s", got, target)
		}
		// Advancing to where it is skips nothing and is not backwards.
		in.run(t, "advance", "--to", target.String(), "--yes").want(t, exitOK, nil, []string{"0 outbox event(s)"})

		// test_decoding slots advance too; their events are not counted.
		in.run(t, "advance", "--slot", decoder, "--to", target.String(), "--yes").
			want(t, exitOK, nil, []string{"could not count the outbox events it skips", `uses the output plugin "test_decoding"`})
		noCountingSlotLeft(t, conn)
	})

	t.Run("drop", func(t *testing.T) {
		in.run(t, "drop", "--slot", busy, "--yes").
			want(t, exitRefused, nil, []string{"in use", fmt.Sprintf("server process %d", busyPID), "nothing was dropped"})
		// On a terminal the warning comes before the question.
		r := invocation{env: in.env, tty: true, stdin: "no\n"}.run(t, "drop")
		r.want(t, exitError, nil, []string{fmt.Sprintf("holds %d unconfirmed outbox event(s) after %s (inserts into public.outbox) and ", after, target), "of WAL"})
		if w, q := strings.Index(r.stderr, "unconfirmed"), strings.Index(r.stderr, "Type "); w < 0 || q < w {
			t.Errorf("warning does not come before the confirmation:\n%s", r.stderr)
		}
		in.run(t, "drop", "--slot", decoder, "--yes").want(t, exitOK, []string{"dropped slot " + decoder}, []string{"could not count its unconfirmed outbox events"})
		in.run(t, "drop", "--yes").want(t, exitOK, []string{"dropped slot " + slot},
			[]string{fmt.Sprintf("%d unconfirmed outbox event(s)", after)})
		noCountingSlotLeft(t, conn)
		want := []string{busy, copied, replay}
		var got []string
		for _, n := range slotNames(t, conn) {
			if strings.HasPrefix(n, slot) {
				got = append(got, n)
			}
		}
		if !slices.Equal(got, want) {
			t.Errorf("slots left = %v, want %v", got, want)
		}
	})
}

func TestUsageSlotOperations(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{name: "help lists the commands and exit 3", args: []string{"--help"}, code: exitOK,
			stdout: []string{"slotctl list", "slotctl advance --to LSN", "slotctl copy    --to NAME", "3  refused for safety"}},
		{name: "list help", args: []string{"help", "list"}, code: exitOK, stdout: []string{"--json", "safe_wal_size", "<slot>_replay"}},
		{name: "advance help", args: []string{"advance", "--help"}, code: exitOK,
			stdout: []string{"--to LSN", "16/B374D848", "--yes", "exit 3", "temporary copy"}},
		{name: "copy help", args: []string{"copy", "-h"}, code: exitOK, stdout: []string{"--to NAME", "pg_copy_logical_replication_slot"}},
		// Usage errors come before any connection: the DSN points nowhere.
		{name: "advance malformed LSN", args: []string{"advance", "--pg-dsn", "postgres://x@127.0.0.1:1/x", "--to", "B374D848", "--yes"},
			code: exitUsage, stderr: []string{"16/B374D848"}},
		{name: "advance off a terminal without --yes", args: []string{"advance", "--pg-dsn", "postgres://x@127.0.0.1:1/x", "--to", "0/1"},
			code: exitUsage, stderr: []string{"--yes"}},
		{name: "copy to a bad name", args: []string{"copy", "--pg-dsn", "postgres://x@127.0.0.1:1/x", "--to", "a b"},
			code: exitUsage, stderr: []string{`"a b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			invocation{}.run(t, tt.args...).want(t, tt.code, tt.stdout, tt.stderr)
		})
	}
}
