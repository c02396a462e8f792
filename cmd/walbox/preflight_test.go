package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/slotctl"
)

// runWalbox runs `walbox run args` in-process and returns its exit code
// and stderr; it fails the test if walbox has not stopped within a
// minute (it started streaming instead of refusing).
func runWalbox(t *testing.T, env map[string]string, args ...string) (int, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- mainCode(append([]string{"run"}, args...), func(k string) string { return env[k] }, &stdout, &stderr)
	}()
	select {
	case code := <-done:
		return code, stderr.String()
	case <-time.After(time.Minute):
		t.Fatalf("walbox run still running after a minute, want it to refuse the configuration")
		return 0, ""
	}
}

// problemLines are the problems `walbox config check` listed.
func problemLines(out string) []string {
	var ps []string
	for _, l := range strings.Split(out, "\n") {
		if p, ok := strings.CutPrefix(l, "  - "); ok {
			ps = append(ps, p)
		}
	}
	return ps
}

// TestPreflightRefusalsAgree: for each configuration that walbox run
// refuses on start, `walbox config check --connect` exits 2 and names the
// problem with the value, its flag and its environment variable, and
// `walbox run` exits 2 with the same text, before it starts anything.
//
// Regression (issue 15): config check printed "OK: no problems found."
// (exit 0) for a wrong column, a missing slot under an existing
// publication and a missing publication under an existing slot, all of
// which walbox run then refused, with exit 1 and, for the columns, neither
// the environment variable nor (when walbox run got that far) the other
// problems.
func TestPreflightRefusalsAgree(t *testing.T) {
	srv := pgtest.Start(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	broker := cluster.ListenAddrs()[0]

	tests := []struct {
		name string
		// setup prepares the database and returns the DSN to use ("" for
		// the superuser's).
		setup func(t *testing.T, conn *pgx.Conn, dsn, slot string) string
		args  []string
		want  []string
	}{
		{
			name: "two wrong columns",
			args: []string{"--column-payload", "body", "--column-aggregate-id", "agg"},
			want: []string{
				`--column-payload "body" (WALBOX_COLUMN_PAYLOAD, YAML key columns.payload)`, `no such column: column "body"`,
				`--column-aggregate-id "agg" (WALBOX_COLUMN_AGGREGATE_ID, YAML key columns.aggregate_id)`, `no such column: column "agg"`,
				"its columns are id, aggregate_type, aggregate_id",
			},
		},
		{
			name: "slot missing under an existing publication",
			setup: func(t *testing.T, conn *pgx.Conn, _, _ string) string {
				execT(t, conn, `CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')`)
				return ""
			},
			want: []string{`--slot "{slot}" (WALBOX_SLOT, YAML key slot)`, `slot "{slot}" does not exist, but publication "walbox" does`, "--create-slot"},
		},
		{
			name: "publication missing under an existing slot",
			setup: func(t *testing.T, conn *pgx.Conn, _, slot string) string {
				execT(t, conn, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')`, slot)
				return ""
			},
			want: []string{`--publication "walbox" (WALBOX_PUBLICATION, YAML key publication)`, `publication "walbox" does not exist but slot "{slot}" does`},
		},
		{
			name: "role without replication",
			setup: func(t *testing.T, conn *pgx.Conn, dsn, slot string) string {
				role := slot + "_norepl"
				execT(t, conn, `CREATE ROLE `+role+` LOGIN PASSWORD 'Norepl-S3cret'`)
				execT(t, conn, `GRANT SELECT ON public.outbox TO `+role)
				u, err := url.Parse(dsn)
				if err != nil {
					t.Fatal(err)
				}
				u.User = url.UserPassword(role, "Norepl-S3cret")
				return u.String()
			},
			want: []string{"--pg-dsn \"postgres://{slot}_norepl:xxxxx@", "(WALBOX_PG_DSN, YAML key pg_dsn)", `role "{slot}_norepl" has neither SUPERUSER nor REPLICATION`},
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot := fmt.Sprintf("preflight_%d", i)
			db := pgtest.NewDatabase(t, srv)
			conn := connectT(t, srv.DSN(db))
			migrateT(t, conn, "001_outbox.sql")
			dsn := srv.DSN(db)
			if tt.setup != nil {
				if d := tt.setup(t, conn, dsn, slot); d != "" {
					dsn = d
				}
			}
			args := append([]string{"--pg-dsn", dsn, "--kafka-brokers", broker, "--slot", slot, "--metrics-addr", ""}, tt.args...)

			code, out, errOut := runConfigCheck(t, nil, append([]string{"--connect", "--connect-timeout", "10s"}, args...)...)
			if code != exitUsage {
				t.Errorf("config check: exit %d, want %d\n%s%s", code, exitUsage, out, errOut)
			}
			problems := problemLines(out)
			for _, w := range tt.want {
				w = strings.ReplaceAll(w, "{slot}", slot)
				if !strings.Contains(strings.Join(problems, "\n"), w) {
					t.Errorf("config check's problems lack %q:\n%s", w, out)
				}
			}

			code, stderr := runWalbox(t, nil, args...)
			t.Logf("config check --connect:\n%s\nwalbox run:\n%s", out[strings.Index(out, "\nConnection checks:"):], stderr)
			if code != exitUsage {
				t.Errorf("walbox run: exit %d, want %d\n%s", code, exitUsage, stderr)
			}
			for _, p := range problems {
				if !strings.Contains(stderr, strings.TrimPrefix(p, "postgres: ")) {
					t.Errorf("walbox run does not report config check's problem\n  %s\nstderr:\n%s", p, stderr)
				}
			}
			if n := strings.Count(strings.TrimRight(stderr, "\n"), "\n"); n != 0 {
				t.Errorf("walbox run printed %d lines, want one:\n%s", n+1, stderr)
			}
			if _, err := slotctl.InspectPublication(ctxT(t), conn, "walbox"); tt.setup == nil && !errors.Is(err, slotctl.ErrPublicationNotFound) {
				t.Errorf("after walbox run refused, InspectPublication = %v, want ErrPublicationNotFound: nothing may be created", err)
			}
		})
	}
}

// TestConfigCheckYAMLTypo: config check prints the file, line and
// suggestion for an unknown key, as walbox run does.
//
// Regression (issue 15): config check listed the problem as only
// "invalid configuration" (its error list was split into the sentinel the
// problem wraps).
func TestConfigCheckYAMLTypo(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(path, []byte("pg_dsn: postgres://walbox@127.0.0.1:1/app\nkafka_brokers: [127.0.0.1:9092]\ncolums:\n  payload: body\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	want := path + `:3: unknown key "colums" (did you mean "columns"?)`
	for _, args := range [][]string{{"--config", path}, {"--config", path, "--connect"}} {
		code, out, errOut := runConfigCheck(t, nil, args...)
		if code != exitUsage || !strings.Contains(out, "  - "+want) {
			t.Errorf("config check %v: exit %d, want %d and the problem %q:\n%s%s", args, code, exitUsage, want, out, errOut)
		}
	}
	code, stderr := runWalbox(t, nil, "--config", path)
	if code != exitUsage || !strings.Contains(stderr, want) {
		t.Errorf("walbox run: exit %d, stderr %q; want %d and %q", code, stderr, exitUsage, want)
	}
}

// TestConfigCheckSaysWhatRunWillCreate: what walbox run creates on start
// is a note, not a problem: the publication and the slot on a first start,
// the slot under an existing publication with --create-slot. Nothing is
// created by the check.
func TestConfigCheckSaysWhatRunWillCreate(t *testing.T) {
	srv := pgtest.Start(t)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	tests := []struct {
		name      string
		havePub   bool
		args      []string
		wantNote  string
		wantNoPub bool
	}{
		{"first start", false, nil, `walbox run will create publication "walbox" and slot "{slot}" on its first start`, true},
		{"create-slot under an existing publication", true, []string{"--create-slot"}, `walbox run will create slot "{slot}" because of --create-slot`, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slot := fmt.Sprintf("willcreate_%d", i)
			db := pgtest.NewDatabase(t, srv)
			conn := connectT(t, srv.DSN(db))
			migrateT(t, conn, "001_outbox.sql")
			if tt.havePub {
				execT(t, conn, `CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')`)
			}
			code, out, errOut := runConfigCheck(t, nil, append([]string{"--connect", "--connect-timeout", "10s",
				"--pg-dsn", srv.DSN(db), "--kafka-brokers", cluster.ListenAddrs()[0], "--slot", slot}, tt.args...)...)
			want := strings.ReplaceAll(tt.wantNote, "{slot}", slot)
			if code != exitOK || !strings.Contains(out, "postgres: note: "+want) || !strings.Contains(out, "OK: no problems found") {
				t.Errorf("exit %d, want 0 with the note %q:\n%s%s", code, want, out, errOut)
			}
			if _, err := slotctl.Inspect(ctxT(t), conn, slot); !errors.Is(err, slotctl.ErrSlotNotFound) {
				t.Errorf("after config check, Inspect(slot) = %v, want ErrSlotNotFound: the check must create nothing", err)
			}
			if _, err := slotctl.InspectPublication(ctxT(t), conn, "walbox"); tt.wantNoPub && !errors.Is(err, slotctl.ErrPublicationNotFound) {
				t.Errorf("after config check, InspectPublication = %v, want ErrPublicationNotFound", err)
			}
		})
	}
}

func connectT(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func migrateT(t *testing.T, conn *pgx.Conn, name string) {
	t.Helper()
	sql, err := migrations.FS.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	execT(t, conn, string(sql))
}

func execT(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}
