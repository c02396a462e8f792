package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

var shared pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "slotctl: close shared server:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// result is one slotctl invocation.
type result struct {
	code           int
	stdout, stderr string
}

// invocation runs slotctl in-process with a fake environment.
type invocation struct {
	env   map[string]string
	stdin string
	tty   bool
}

func (in invocation) run(t *testing.T, args ...string) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	e := env{
		stdin:      strings.NewReader(in.stdin),
		stdout:     &stdout,
		stderr:     &stderr,
		getenv:     func(k string) string { return in.env[k] },
		stdinIsTTY: in.tty,
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := run(ctx, args, e)
	t.Logf("slotctl %s -> %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	return result{code, stdout.String(), stderr.String()}
}

func (r result) want(t *testing.T, code int, stdout, stderr []string) {
	t.Helper()
	if r.code != code {
		t.Errorf("exit code %d, want %d", r.code, code)
	}
	for _, s := range stdout {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("stdout does not contain %q", s)
		}
	}
	for _, s := range stderr {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("stderr does not contain %q", s)
		}
	}
}

func TestUsage(t *testing.T) {
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stdout []string
		stderr []string
	}{
		{name: "help documents everything", args: []string{"--help"}, code: exitOK,
			stdout: []string{"create", "inspect", "drop", "--pg-dsn", "WALBOX_PG_DSN", "WALBOX_TABLE", "WALBOX_SLOT",
				"WALBOX_PUBLICATION", "--json", "--publication-too", "--yes", "Exit status"}},
		{name: "help command", args: []string{"help", "drop"}, code: exitOK, stdout: []string{"--publication-too"}},
		{name: "subcommand help", args: []string{"inspect", "-h"}, code: exitOK, stdout: []string{"--json"}},
		{name: "no arguments", args: nil, code: exitUsage, stderr: []string{"Usage:"}},
		{name: "unknown command", args: []string{"frobnicate"}, code: exitUsage, stderr: []string{`unknown command "frobnicate"`}},
		{name: "unknown flag", args: []string{"create", "--nope"}, code: exitUsage, stderr: []string{"-nope", "slotctl create --help"}},
		{name: "stray argument", args: []string{"inspect", "walbox"}, code: exitUsage, stderr: []string{`unexpected argument "walbox"`}},
		{name: "no DSN", args: []string{"inspect"}, code: exitUsage, stderr: []string{"WALBOX_PG_DSN"}},
		{name: "bad slot name from the environment", args: []string{"inspect"},
			env:  map[string]string{"WALBOX_PG_DSN": "postgres://x@127.0.0.1:1/x", "WALBOX_SLOT": "Bad-Slot"},
			code: exitUsage, stderr: []string{`slot "Bad-Slot"`}},
		{name: "drop off a terminal without --yes", args: []string{"drop", "--pg-dsn", "postgres://x@127.0.0.1:1/x"},
			code: exitUsage, stderr: []string{"--yes"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			invocation{env: tt.env}.run(t, tt.args...).want(t, tt.code, tt.stdout, tt.stderr)
		})
	}
}

// setup creates a database with the outbox table on the shared server and
// returns an invocation whose environment points slotctl at it, with a slot
// named after the database.
func setup(t *testing.T) (invocation, *pgx.Conn, string) {
	t.Helper()
	srv := shared.Server(t)
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

func TestCreateInspectDrop(t *testing.T) {
	in, conn, slot := setup(t)

	in.run(t, "inspect").want(t, exitError, []string{"slot " + slot + ": not found", "publication walbox: not found"},
		[]string{"problem(s) found"})

	in.run(t, "create").want(t, exitOK, []string{"publication walbox: created", "slot " + slot + ": created", "pgoutput"}, nil)
	in.run(t, "create").want(t, exitOK, []string{"publication walbox: already exists", "slot " + slot + ": already exists"}, nil)

	r := in.run(t, "inspect")
	r.want(t, exitOK, []string{"slot " + slot, "plugin:", "pgoutput", "active:", "no", "wal_status:", "reserved",
		"publication walbox", "tables:", "public.outbox", "publishes:", "insert", "problems: none"}, nil)

	r = in.run(t, "inspect", "--json")
	r.want(t, exitOK, nil, nil)
	var got report
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatalf("inspect --json: %v", err)
	}
	if got.Slot == nil || got.Slot.Name != slot || got.Slot.Plugin != "pgoutput" || got.Slot.Active ||
		!strings.Contains(got.Slot.ConfirmedFlushLSN, "/") || got.Publication == nil ||
		strings.Join(got.Publication.Tables, ",") != "public.outbox" || len(got.Problems) != 0 {
		t.Errorf("inspect --json = %s", r.stdout)
	}

	// A human who types something else keeps the slot.
	invocation{env: in.env, tty: true, stdin: "no\n"}.run(t, "drop").
		want(t, exitError, nil, []string{"Type \"" + slot + "\" to confirm", "not confirmed"})
	if _, err := slotctl.Inspect(context.Background(), conn, slot); err != nil {
		t.Fatalf("slot gone after an unconfirmed drop: %v", err)
	}
	invocation{env: in.env, tty: true, stdin: slot + "\n"}.run(t, "drop").
		want(t, exitOK, []string{"dropped slot " + slot}, nil)

	// The slot is gone; the publication is still there and goes now.
	in.run(t, "drop", "--yes", "--publication-too").
		want(t, exitOK, []string{"dropped publication walbox"}, []string{"does not exist; skipping"})
	in.run(t, "drop", "--yes", "--publication-too").
		want(t, exitError, nil, []string{"nothing to drop"})
}

func TestInspectReportsMismatch(t *testing.T) {
	in, conn, slot := setup(t)
	ctx := context.Background()
	for _, sql := range []string{
		"CREATE TABLE other (id int)",
		"CREATE PUBLICATION walbox FOR TABLE other WITH (publish = 'insert')",
		fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'test_decoding')", slot),
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	in.run(t, "inspect").want(t, exitError,
		[]string{"public.other", "does not include public.outbox", `"test_decoding"`}, nil)
	in.run(t, "create").want(t, exitError, nil, []string{"does not match", "SET TABLE"})
}

// TestCreateChecksColumns: slotctl create reads walbox's routing options
// and refuses a table that lacks a column they name, before creating
// anything (before, only walbox run checked columns, at its first start).
func TestCreateChecksColumns(t *testing.T) {
	in, conn, slot := setup(t)
	in.env["WALBOX_COLUMN_AGGREGATE_ID"] = "partition_key"
	in.run(t, "create").want(t, exitError, nil, []string{"partition_key"})
	if _, err := slotctl.Inspect(context.Background(), conn, slot); !errors.Is(err, slotctl.ErrSlotNotFound) {
		t.Fatalf("slot after a refused create: %v, want ErrSlotNotFound", err)
	}
	delete(in.env, "WALBOX_COLUMN_AGGREGATE_ID")
	in.run(t, "create").want(t, exitOK, []string{"slot " + slot + ": created"}, nil)
}

func TestDropRefusesActiveSlot(t *testing.T) {
	in, _, slot := setup(t)
	in.run(t, "create").want(t, exitOK, nil, nil)

	ctx := context.Background()
	repl, err := pgconn.Connect(ctx, in.env["WALBOX_PG_DSN"]+"&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	defer repl.Close(ctx)
	if err := pglogrepl.StartReplication(ctx, repl, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walbox'"},
	}); err != nil {
		t.Fatal(err)
	}
	in.run(t, "inspect").want(t, exitOK, []string{"active:", "yes, server process"}, nil)
	in.run(t, "drop", "--yes").want(t, exitRefused, nil, []string{"in use", "pg_terminate_backend", "nothing was dropped"})
}

func TestBytesIEC(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 16 << 20: "16.0 MiB", 3 << 30: "3.0 GiB"} {
		if got := bytesIEC(n); got != want {
			t.Errorf("bytesIEC(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestIsTerminal(t *testing.T) {
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	if isTerminal(devNull) {
		t.Error("isTerminal(/dev/null) = true; drop </dev/null would prompt instead of requiring --yes")
	}
}
