package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// RequireEnv names the environment variable that turns a missing PostgreSQL
// into a test failure instead of a skip. CI sets it so that integration tests
// cannot pass by not running.
const RequireEnv = "WALBOX_REQUIRE_INTEGRATION"

// WithSetting returns an option for Start that sets one postgresql.conf
// setting, e.g. WithSetting("wal_level", "replica").
func WithSetting(name, value string) func(*Options) {
	return func(o *Options) {
		if o.Settings == nil {
			o.Settings = map[string]string{}
		}
		o.Settings[name] = value
	}
}

// WithCommandLine returns an option for Start that passes one setting on
// the postgres command line (-c name=value).
func WithCommandLine(name, value string) func(*Options) {
	return func(o *Options) {
		if o.CommandLine == nil {
			o.CommandLine = map[string]string{}
		}
		o.CommandLine[name] = value
	}
}

// startTimeout bounds initdb plus startup in the test helpers.
const startTimeout = 2 * time.Minute

// Start starts a server for one test and closes it in t.Cleanup. When the
// machine cannot run PostgreSQL (ErrUnavailable) the test is skipped, unless
// WALBOX_REQUIRE_INTEGRATION=1, which makes it fail.
func Start(t testing.TB, opts ...func(*Options)) *Server {
	t.Helper()
	var o Options
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	s, err := StartServer(ctx, o)
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("pgtest: close server: %v", err)
		}
	})
	return s
}

// RequireBinDir returns FindBinDir's directory for a test that runs the
// PostgreSQL binaries itself. When there are none (ErrUnavailable) the
// test is skipped, unless WALBOX_REQUIRE_INTEGRATION=1, which makes it
// fail.
func RequireBinDir(t testing.TB) string {
	t.Helper()
	dir, err := FindBinDir()
	if err != nil {
		skipOrFatal(t, err)
	}
	return dir
}

func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) && os.Getenv(RequireEnv) != "1" {
		t.Skipf("skipping integration test (set %s=1 to fail instead): %v", RequireEnv, err)
	}
	t.Fatal(err)
}

// Shared is one server shared by the tests of a package, started on first
// use. Tests sharing it should work in their own database (NewDatabase) and
// use distinct slot names, since slots are cluster-wide. The zero value is
// ready to use; set Options before the first Server call. Safe for
// concurrent use.
//
//	var shared pgtest.Shared
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		shared.Close()
//		os.Exit(code)
//	}
type Shared struct {
	Options Options

	once sync.Once
	srv  *Server
	err  error
}

// Server returns the shared server, starting it on the first call. It skips
// or fails t like Start when the server cannot be started.
func (sh *Shared) Server(t testing.TB) *Server {
	t.Helper()
	sh.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		sh.srv, sh.err = StartServer(ctx, sh.Options)
	})
	if sh.err != nil {
		skipOrFatal(t, sh.err)
	}
	return sh.srv
}

// Close closes the server if it was started. Call it from TestMain after
// m.Run.
func (sh *Shared) Close() error {
	sh.once.Do(func() {}) // no server may start after Close
	if sh.srv == nil {
		return nil
	}
	return sh.srv.Close()
}

var dbSeq atomic.Int64

var notIdent = regexp.MustCompile(`[^a-z0-9_]+`)

// NewDatabase creates an empty database named after the test and returns
// its name. On cleanup it disconnects the database's sessions, drops the
// replication slots that belong to it and drops it, so a shared server does
// not accumulate them; a cleanup failure is only logged.
func NewDatabase(t testing.TB, s *Server) string {
	t.Helper()
	name := fmt.Sprintf("t%d_%s", dbSeq.Add(1), notIdent.ReplaceAllString(strings.ToLower(t.Name()), "_"))
	if len(name) > 63 {
		name = name[:63]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("pgtest: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := s.dropDatabase(ctx, name); err != nil {
			t.Logf("pgtest: drop database %s: %v", name, err)
		}
	})
	return name
}

// exec runs one statement in the postgres database.
func (s *Server) exec(ctx context.Context, sql string, args ...any) error {
	conn, err := pgx.Connect(ctx, s.adminDSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, sql, args...)
	return err
}

// dropDatabase drops name, first ending its sessions (walsenders included)
// and its replication slots, both of which block DROP DATABASE.
func (s *Server) dropDatabase(ctx context.Context, name string) error {
	conn, err := pgx.Connect(ctx, s.adminDSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for {
		if _, err := conn.Exec(ctx,
			`SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()`, name); err != nil {
			return err
		}
		var active int
		if err := conn.QueryRow(ctx,
			`SELECT count(*) FROM pg_replication_slots WHERE database = $1 AND active`, name).Scan(&active); err != nil {
			return err
		}
		if active == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("slots still active: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if _, err := conn.Exec(ctx,
		`SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1`, name); err != nil {
		return err
	}
	_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	return err
}

// VersionsFrom returns the installed versions of major version min and
// newer, oldest first, for a test of a feature they alone have (why names
// it). With none installed the test is skipped, or fails when
// WALBOX_REQUIRE_INTEGRATION=1: CI installs them, and a feature whose
// every test skipped there would pass untested.
func VersionsFrom(t testing.TB, min int, why string) []Version {
	t.Helper()
	installed, err := InstalledVersions()
	if err != nil {
		skipOrFatal(t, err)
	}
	var out []Version
	for _, v := range installed {
		if v.Major >= min {
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		skipOrFatal(t, fmt.Errorf("%w: %s needs PostgreSQL %d or newer; none is installed (go run ./internal/pgtest/cmd/pginstall)", ErrUnavailable, why, min))
	}
	return out
}
