package inbox

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Migrations holds migrations/001_inbox.sql, written for the default table
// public.walbox_inbox, for tools that apply SQL files themselves.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// migrationFile is the one migration.
const migrationFile = "migrations/001_inbox.sql"

// Execer runs a statement: *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// MigrationSQL returns migrations/001_inbox.sql for the configured table:
// the default table's name replaced by the configured one, quoted, and the
// index named <table>_received_at_idx.
func (ib *Inbox) MigrationSQL() (string, error) {
	b, err := Migrations.ReadFile(migrationFile)
	if err != nil {
		return "", fmt.Errorf("inbox: read embedded %s: %w", migrationFile, err)
	}
	def, err := parseTable(DefaultTable)
	if err != nil {
		return "", err
	}
	sql := string(b)
	// The index first: its name contains the table's.
	sql = strings.ReplaceAll(sql, def.name+indexSuffix, ib.table.index())
	sql = strings.ReplaceAll(sql, def.String(), ib.table.sanitize())
	return sql, nil
}

// Migrate creates the inbox table and its index if they do not exist (the
// SQL of MigrationSQL). Idempotent. Run it as the role that should own the
// table; the consumer's role needs SELECT, INSERT and DELETE on it.
func (ib *Inbox) Migrate(ctx context.Context, db Execer) error {
	sql, err := ib.MigrationSQL()
	if err != nil {
		return err
	}
	if _, err := db.Exec(ctx, sql); err != nil {
		return fmt.Errorf("inbox: create table %s: %w", ib.table, err)
	}
	return nil
}
