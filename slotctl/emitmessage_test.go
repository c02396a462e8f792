package slotctl_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

// TestEmitMessagePrivilege runs on every installed PostgreSQL version
// (WALBOX_PG_VERSIONS): PostgreSQL 17 added pg_logical_emit_message
// overloads with a flush argument, and migration 004 must close them all.
// Before issue 7 nothing checked this, and PUBLIC could execute every
// overload, so any role could forge events under --message-prefix.
func TestEmitMessagePrivilege(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		t.Parallel()
		e := newEnv(t, pgtest.Start(t, pgtest.WithBinDir(v.BinDir)), "001_outbox.sql")
		ctx := ctxT(t)
		e.exec(t, "CREATE ROLE app LOGIN", "CREATE ROLE intruder LOGIN")

		err := slotctl.CheckEmitMessagePrivilege(ctx, e.conn)
		if !errors.Is(err, slotctl.ErrEmitMessagePublic) {
			t.Fatalf("CheckEmitMessagePrivilege() on a default server = %v, want ErrEmitMessagePublic", err)
		}
		for _, s := range []string{"pg_logical_emit_message(boolean,text,text", "pg_logical_emit_message(boolean,text,bytea",
			"004_emit_message_privilege.sql", "REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error %q does not mention %q", err, s)
			}
		}
		if v.Major >= 17 && !strings.Contains(err.Error(), "text,boolean)") {
			t.Errorf("error %q does not name the flush overloads of PostgreSQL 17+", err)
		}
		emit(t, e, "intruder", true) // what the check warns about

		e.migrate(t, "004_emit_message_privilege.sql")
		e.migrate(t, "004_emit_message_privilege.sql") // idempotent
		if err := slotctl.CheckEmitMessagePrivilege(ctx, e.conn); err != nil {
			t.Fatalf("CheckEmitMessagePrivilege() after migration 004 = %v", err)
		}
		emit(t, e, "intruder", false)
		e.exec(t, "GRANT outbox_writer TO app")
		emit(t, e, "app", true)
	})
}

// emit calls every overload of pg_logical_emit_message present as role
// and checks whether it was allowed.
func emit(t *testing.T, e env, role string, wantAllowed bool) {
	t.Helper()
	ctx := ctxT(t)
	var calls []string
	rows, err := e.conn.Query(ctx, `SELECT pronargs FROM pg_proc
		WHERE proname = 'pg_logical_emit_message' AND pronamespace = 'pg_catalog'::regnamespace`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n int
		if err := rows.Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 4 {
			calls = append(calls, "SELECT pg_logical_emit_message(true, 'outbox', 'x'::text, false)",
				"SELECT pg_logical_emit_message(true, 'outbox', 'x'::bytea, false)")
		} else {
			calls = append(calls, "SELECT pg_logical_emit_message(true, 'outbox', 'x'::text)",
				"SELECT pg_logical_emit_message(true, 'outbox', 'x'::bytea)")
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	conn := e.connectAs(t, role)
	for _, c := range calls {
		_, err := conn.Exec(ctx, c)
		switch {
		case wantAllowed && err != nil:
			t.Errorf("%s as %s: %v, want it allowed", c, role, err)
		case !wantAllowed && err == nil:
			t.Errorf("%s as %s succeeded, want permission denied", c, role)
		case !wantAllowed && !strings.Contains(err.Error(), "42501"):
			t.Errorf("%s as %s: %v, want permission denied (42501)", c, role, err)
		}
	}
}

// TestEmitMessageRevokeSQLMatchesMigration keeps the SQL that walbox prints
// identical to the body of migrations/004.
func TestEmitMessageRevokeSQLMatchesMigration(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "migrations", "004_emit_message_privilege.sql"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), slotctl.EmitMessageRevokeSQL) {
		t.Errorf("migrations/004_emit_message_privilege.sql does not contain slotctl.EmitMessageRevokeSQL:\n%s", slotctl.EmitMessageRevokeSQL)
	}
}
