package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
)

// TestRoleWithoutPassword follows the quickstart against a server that, like
// a production one, asks for passwords over TCP and has no TLS: migrations
// 001-003 as a superuser, then slotctl as the walbox role with a DSN that
// has no sslmode (pgx's default, prefer, tries TLS first, then plaintext).
//
// Regression (issue 15): 003 creates walbox without a password, and the
// failure printed pgx's two attempts joined, a spurious "tls error: server
// refused TLS connection" before the real cause, with no word on the fix.
// Now only the cause is printed, with what to do; and the password line of
// 003's header, run as written, lets slotctl in.
func TestRoleWithoutPassword(t *testing.T) {
	srv := pgtest.Start(t, pgtest.WithPasswordAuth())
	db := pgtest.NewDatabase(t, srv)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, f := range []string{"001_outbox.sql", "002_publication.sql", "003_walbox_role.sql"} {
		sql, err := os.ReadFile(filepath.Join("..", "..", "migrations", f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	dsn := func(userinfo string) string {
		return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s", userinfo, srv.Port(), db)
	}

	in := invocation{env: map[string]string{"WALBOX_PG_DSN": dsn("walbox"), "WALBOX_SLOT": db}}
	r := in.run(t, "create")
	r.want(t, exitError, nil, []string{`password authentication failed for user "walbox"`, "SQLSTATE 28P01",
		"ALTER ROLE walbox PASSWORD", "migrations/003_walbox_role.sql", "postgres://walbox:PASSWORD@"})
	if strings.Contains(r.stderr, "TLS") {
		t.Errorf("stderr names the TLS attempt, which is not the cause:\n%s", r.stderr)
	}

	// A wrong password: the same cause, and the hint says to check it.
	in.env["WALBOX_PG_DSN"] = dsn("walbox:wrong")
	r = in.run(t, "inspect")
	r.want(t, exitError, nil, []string{`password authentication failed for user "walbox"`, "check the password"})
	if strings.Contains(r.stderr, "TLS") || strings.Contains(r.stderr, "wrong") {
		t.Errorf("stderr names the TLS attempt or the password:\n%s", r.stderr)
	}

	// The line 003's header gives, run as written, with a password of ours.
	setPassword(t, srv.DSN(db), "s3cret-Pw")
	in.env["WALBOX_PG_DSN"] = dsn("walbox:s3cret-Pw")
	in.run(t, "create").want(t, exitOK, []string{"slot " + db + ": created"}, nil)

	// TLS required by the DSN, and the only attempt: its failure is the cause.
	in.env["WALBOX_PG_DSN"] = dsn("walbox:s3cret-Pw") + "?sslmode=require"
	in.run(t, "inspect").want(t, exitError, nil, []string{"server refused TLS connection"})
}

// setPassword runs the psql line of 003_walbox_role.sql's header comment
// as written, with superuserDSN as $SUPERUSER_DSN and password in place of
// secret. Without psql, it runs the line's statement through pgx.
func setPassword(t *testing.T, superuserDSN, password string) {
	t.Helper()
	sql, err := os.ReadFile(filepath.Join("..", "..", "migrations", "003_walbox_role.sql"))
	if err != nil {
		t.Fatal(err)
	}
	const prefix = `psql "$SUPERUSER_DSN" -c "ALTER ROLE walbox PASSWORD 'secret'"`
	var line string
	for _, l := range strings.Split(string(sql), "\n") {
		if l = strings.TrimSpace(strings.TrimPrefix(l, "--")); strings.HasPrefix(l, prefix) {
			line = l
		}
	}
	if line == "" {
		t.Fatalf("003_walbox_role.sql's header has no line %s", prefix)
	}
	line = strings.Replace(line, "'secret'", "'"+password+"'", 1)
	psql, err := exec.LookPath("psql")
	if dir, derr := pgtest.FindBinDir(); derr == nil {
		if _, serr := os.Stat(filepath.Join(dir, "psql")); serr == nil {
			psql, err = filepath.Join(dir, "psql"), nil // the server's version
		}
	}
	if err != nil {
		t.Logf("no psql: running the statement of %q through pgx", line)
		conn, err := pgx.Connect(context.Background(), superuserDSN)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "ALTER ROLE walbox PASSWORD '"+password+"'"); err != nil {
			t.Fatal(err)
		}
		return
	}
	cmd := exec.Command("sh", "-c", line)
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(psql)+string(os.PathListSeparator)+os.Getenv("PATH"), "SUPERUSER_DSN="+superuserDSN)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", line, err, out)
	}
}
