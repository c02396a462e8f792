package pgtest_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
)

var shared pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		println("pgtest: close shared server:", err.Error())
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func show(t *testing.T, conn *pgx.Conn, name string) string {
	t.Helper()
	var v string
	if err := conn.QueryRow(context.Background(), "SELECT current_setting($1)", name).Scan(&v); err != nil {
		t.Fatalf("current_setting(%s): %v", name, err)
	}
	return v
}

func TestFindBinDir(t *testing.T) {
	dir, err := pgtest.FindBinDir()
	if errors.Is(err, pgtest.ErrUnavailable) && os.Getenv(pgtest.RequireEnv) != "1" {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"initdb", "postgres", "pg_ctl"} {
		if _, err := os.Stat(dir + "/" + name); err != nil {
			t.Errorf("FindBinDir() = %s, which lacks %s: %v", dir, name, err)
		}
	}

	t.Run("PG_BIN wins and is checked", func(t *testing.T) {
		t.Setenv("PG_BIN", t.TempDir())
		if _, err := pgtest.FindBinDir(); !errors.Is(err, pgtest.ErrUnavailable) {
			t.Fatalf("FindBinDir() with an empty PG_BIN: err = %v, want ErrUnavailable", err)
		}
	})
}

// TestLifecycle covers one server from start to close: defaults, restart,
// crash (immediate shutdown) and recovery, and that Close leaves nothing.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := pgtest.Start(t)

	conn := connect(t, srv.DSN("postgres"))
	for name, want := range map[string]string{
		"wal_level":             "logical",
		"fsync":                 "off",
		"max_replication_slots": "20",
		"listen_addresses":      "127.0.0.1",
		"port":                  itoa(srv.Port()),
		// so that the suites' larger transactions stream (pgoutput 2+)
		"logical_decoding_work_mem": "64kB",
	} {
		if got := show(t, conn, name); got != want {
			t.Errorf("SHOW %s = %q, want %q", name, got, want)
		}
	}
	if got := show(t, conn, "server_version_num"); !strings.HasPrefix(got, itoa(srv.MajorVersion())) {
		t.Errorf("server_version_num = %s, MajorVersion() = %d", got, srv.MajorVersion())
	}
	var user string
	if err := conn.QueryRow(ctx, "SELECT current_user").Scan(&user); err != nil || user != "postgres" {
		t.Fatalf("current_user = %q, %v; want postgres", user, err)
	}
	mustExec(t, conn, "CREATE TABLE kept (id int PRIMARY KEY)")
	mustExec(t, conn, "INSERT INTO kept VALUES (1)")
	conn.Close(ctx)

	port := srv.Port()
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart: %v", err)
	}
	if srv.Port() != port {
		t.Fatalf("port changed across Restart: %d -> %d", port, srv.Port())
	}
	conn = connect(t, srv.DSN("postgres"))
	if n := count(t, conn); n != 1 {
		t.Fatalf("after Restart: %d rows, want 1", n)
	}
	mustExec(t, conn, "INSERT INTO kept VALUES (2)")
	conn.Close(ctx)

	if err := srv.StopImmediate(ctx); err != nil {
		t.Fatalf("StopImmediate: %v", err)
	}
	if err := srv.StopImmediate(ctx); err != nil {
		t.Fatalf("StopImmediate on a stopped server: %v", err)
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatalf("Restart after StopImmediate: %v", err)
	}
	if log := srv.LogTail(50); !strings.Contains(log, "not properly shut down") {
		t.Errorf("no crash recovery in the log after StopImmediate:\n%s", log)
	}
	conn = connect(t, srv.DSN("postgres"))
	if n := count(t, conn); n != 2 {
		t.Fatalf("after crash recovery: %d rows, want 2", n)
	}
	conn.Close(ctx)
	pidFile, err := os.ReadFile(srv.DataDir() + "/postmaster.pid")
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.SplitN(string(pidFile), "\n", 2)[0])
	if err != nil {
		t.Fatalf("postmaster.pid: %v", err)
	}

	if err := srv.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("postmaster %d still exists after Close (kill 0: %v)", pid, err)
	}
	if _, err := os.Stat(srv.DataDir()); !os.IsNotExist(err) {
		t.Errorf("data dir %s still exists after Close: %v", srv.DataDir(), err)
	}
}

func TestSettingsOverrideDefaults(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t,
		pgtest.WithSetting("wal_level", "replica"),
		pgtest.WithSetting("application_name", `it's a \ test`),
	)
	conn := connect(t, srv.DSN("postgres"))
	if got := show(t, conn, "wal_level"); got != "replica" {
		t.Errorf("wal_level = %q, want replica", got)
	}
	if got := show(t, conn, "application_name"); got != `it's a \ test` {
		t.Errorf("application_name = %q: quoting in postgresql.conf is wrong", got)
	}
}

// TestServerDefaultSetting: ServerDefault drops pgtest's own default, so a
// test that measures with PostgreSQL's settings gets the 64 MB
// logical_decoding_work_mem, and any other setting its server default.
func TestServerDefaultSetting(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, pgtest.WorkMemServerDefault, pgtest.WithSetting("max_wal_senders", pgtest.ServerDefault))
	conn := connect(t, srv.DSN("postgres"))
	if got := show(t, conn, "logical_decoding_work_mem"); got != "64MB" {
		t.Errorf("logical_decoding_work_mem = %q, want the server's 64MB", got)
	}
	if got := show(t, conn, "max_wal_senders"); got != "10" {
		t.Errorf("max_wal_senders = %q, want the server's 10", got)
	}
	if got := show(t, conn, "wal_level"); got != "logical" {
		t.Errorf("wal_level = %q: the other defaults must stay", got)
	}
}

func TestStartServerRejectsBadSettings(t *testing.T) {
	for _, settings := range []map[string]string{
		{"wal_level = logical\nfsync": "on"},
		{"wal_level": "logical\nfsync = on"},
	} {
		if _, err := pgtest.StartServer(context.Background(), pgtest.Options{Settings: settings}); err == nil {
			t.Errorf("StartServer(%q) succeeded; want an error", settings)
		}
	}
}

func TestStartServerFailureIncludesLog(t *testing.T) {
	// It used to skip on a missing PostgreSQL even with
	// WALBOX_REQUIRE_INTEGRATION=1, so CI could pass without running it.
	pgtest.RequireBinDir(t)
	_, err := pgtest.StartServer(context.Background(), pgtest.Options{
		Settings: map[string]string{"no_such_setting_xyz": "1"},
	})
	if err == nil {
		t.Fatal("StartServer with an unknown setting succeeded")
	}
	if !strings.Contains(err.Error(), "no_such_setting_xyz") {
		t.Errorf("error does not include the server log naming the bad setting:\n%v", err)
	}
}

func TestDSN(t *testing.T) {
	srv := shared.Server(t)
	want := "postgres://postgres@127.0.0.1:" + itoa(srv.Port()) + "/walbox?sslmode=disable"
	if got := srv.DSN("walbox"); got != want {
		t.Errorf("DSN = %s, want %s", got, want)
	}
}

func TestNewDatabase(t *testing.T) {
	srv := shared.Server(t)
	var name string
	t.Run("inner", func(t *testing.T) {
		name = pgtest.NewDatabase(t, srv)
		conn := connect(t, srv.DSN(name))
		// A slot in the database would make a plain DROP DATABASE fail;
		// cleanup must remove it.
		mustExec(t, conn, "SELECT pg_create_logical_replication_slot('pgtest_newdb', 'pgoutput')")
	})
	conn := connect(t, srv.DSN("postgres"))
	var n int
	if err := conn.QueryRow(context.Background(),
		"SELECT (SELECT count(*) FROM pg_database WHERE datname = $1) + (SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'pgtest_newdb')",
		name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("database %s or its slot survived the test's cleanup", name)
	}
}

func mustExec(t *testing.T, conn *pgx.Conn, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func count(t *testing.T, conn *pgx.Conn) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM kept").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func itoa(n int) string { return strconv.Itoa(n) }
