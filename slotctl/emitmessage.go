package slotctl

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// EmitMessageRevokeSQL is what migrations/004_emit_message_privilege.sql
// does, in short: revoke EXECUTE on every pg_logical_emit_message overload
// from PUBLIC (PostgreSQL 17 added ones with a flush argument) and grant it
// to the writers' role outbox_writer, created NOLOGIN if missing. Run it as a superuser in the outbox's database,
// then GRANT outbox_writer TO the roles that write events.
const EmitMessageRevokeSQL = `DO $$
DECLARE f regprocedure;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_writer') THEN
        CREATE ROLE outbox_writer NOLOGIN;
    END IF;
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO outbox_writer', f);
    END LOOP;
END
$$;`

// CheckEmitMessagePrivilege reports whether PUBLIC, that is every role of
// the database, may execute any overload of pg_logical_emit_message. With
// message routing on (--message-prefix) such a role could emit events with
// chosen ids, headers and topics. It returns nil when none is executable by
// PUBLIC, ErrEmitMessagePublic naming the overloads and the SQL that fixes
// it (migrations/004_emit_message_privilege.sql) otherwise. It changes
// nothing. Function privileges are per database: check the outbox's.
func CheckEmitMessagePrivilege(ctx context.Context, conn Querier) error {
	// A NULL proacl means the default privileges, which for functions
	// include EXECUTE for PUBLIC (grantee 0 in aclexplode).
	rows, err := conn.Query(ctx, `
SELECT p.oid::regprocedure::text
FROM pg_proc p
WHERE p.proname = 'pg_logical_emit_message'
  AND p.pronamespace = 'pg_catalog'::regnamespace
  AND EXISTS (SELECT 1 FROM aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
              WHERE a.grantee = 0 AND a.privilege_type = 'EXECUTE')
ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("slotctl: read the privileges of pg_logical_emit_message: %w", err)
	}
	public, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("slotctl: read the privileges of pg_logical_emit_message: %w", err)
	}
	if len(public) == 0 {
		return nil
	}
	return fmt.Errorf("%w: every role (PUBLIC) may execute %s, so any role that can connect could emit outbox messages "+
		"with chosen ids, headers and topics; as a superuser, in this database, apply migrations/004_emit_message_privilege.sql "+
		"(grant the role outbox_writer to the roles that write events, not to walbox's; then apply migrations/005_heartbeat_function.sql so that walbox's heartbeats keep working), or run:\n%s",
		ErrEmitMessagePublic, strings.Join(public, " and "), EmitMessageRevokeSQL)
}
