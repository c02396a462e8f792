package slotctl_test

import (
	"context"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
)

// shared is the server of most tests. Each test works in its own database
// (pgtest.NewDatabase) and names its slot after that database, since slots
// are cluster-wide.
var shared pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		println("slotctl tests: close shared server:", err.Error())
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// env is one test's database.
type env struct {
	srv  *pgtest.Server
	db   string    // database name, also a valid unique slot name
	conn *pgx.Conn // superuser postgres, in db
}

// newEnv creates a database on srv (the shared server when nil) and applies
// the named files of migrations/ to it as the superuser.
func newEnv(t *testing.T, srv *pgtest.Server, migrations ...string) env {
	t.Helper()
	if srv == nil {
		srv = shared.Server(t)
	}
	e := env{srv: srv, db: pgtest.NewDatabase(t, srv)}
	e.conn = e.connectAs(t, "postgres")
	for _, m := range migrations {
		e.migrate(t, m)
	}
	return e
}

func (e env) migrate(t *testing.T, name string) {
	t.Helper()
	sql, err := os.ReadFile(filepath.Join("..", "migrations", name))
	if err != nil {
		t.Fatal(err)
	}
	// Exec without arguments uses the simple protocol: the whole file runs as
	// psql -f would run it.
	if _, err := e.conn.Exec(context.Background(), string(sql)); err != nil {
		t.Fatalf("apply migrations/%s: %v", name, err)
	}
}

// dsnAs returns the DSN of e's database for role.
func (e env) dsnAs(t *testing.T, role string) string {
	t.Helper()
	u, err := url.Parse(e.srv.DSN(e.db))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(role)
	return u.String()
}

func (e env) connectAs(t *testing.T, role string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, e.dsnAs(t, role))
	if err != nil {
		t.Fatalf("connect as %s: %v", role, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// exec runs SQL statements as the superuser.
func (e env) exec(t *testing.T, stmts ...string) {
	t.Helper()
	for _, s := range stmts {
		if _, err := e.conn.Exec(context.Background(), s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
