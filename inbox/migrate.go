package inbox

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Migrations holds the files of migrations/, written for the default table
// public.walbox_inbox, for tools that apply SQL files themselves, in the
// order of their names: 001_inbox.sql creates the table, 002_inbox_source.sql
// adds source to its key.
//
//go:embed migrations/*.sql
var Migrations embed.FS

// migrationFiles are the migrations, in the order they apply.
var migrationFiles = []string{"migrations/001_inbox.sql", "migrations/002_inbox_source.sql"}

// Execer runs a statement: *pgx.Conn, *pgxpool.Pool and pgx.Tx satisfy it.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// MigrationSQL returns the files of migrations/, in order, for the
// configured table: the default table's name replaced by the configured
// one, quoted, and the index named <table>_received_at_idx.
func (ib *Inbox) MigrationSQL() (string, error) {
	def, err := parseTable(DefaultTable)
	if err != nil {
		return "", err
	}
	var all strings.Builder
	for _, f := range migrationFiles {
		b, err := Migrations.ReadFile(f)
		if err != nil {
			return "", fmt.Errorf("inbox: read embedded %s: %w", f, err)
		}
		sql := string(b)
		// The index first: its name contains the table's.
		sql = strings.ReplaceAll(sql, def.name+indexSuffix, ib.table.index())
		// Then the table's name inside string literals ('…'::regclass in
		// 002's DO block), where a quote in it must be doubled.
		sql = strings.ReplaceAll(sql, "'"+def.String()+"'", "'"+strings.ReplaceAll(ib.table.sanitize(), "'", "''")+"'")
		sql = strings.ReplaceAll(sql, def.String(), ib.table.sanitize())
		all.WriteString(sql)
		all.WriteString("\n")
	}
	return all.String(), nil
}

// Migrate creates the inbox table and its index if they do not exist, and
// upgrades a table of an earlier version (the SQL of MigrationSQL, in one
// transaction). Idempotent, and safe to call from several instances at
// once (they take turns on an advisory lock). Run it as the role that should own the table;
// the consumer's role needs SELECT, INSERT and DELETE on it.
func (ib *Inbox) Migrate(ctx context.Context, db Execer) error {
	sql, err := ib.MigrationSQL()
	if err != nil {
		return err
	}
	// Every instance of a group may call Migrate at start, several at once
	// on a new database: CREATE TABLE IF NOT EXISTS racing itself fails one
	// with a duplicate key on pg_type. A transaction-level advisory lock
	// named after the table runs them one after the other (the statements
	// of one Exec are one transaction, or the caller's).
	lock := `SELECT pg_advisory_xact_lock(hashtext('walbox inbox migrate ' || '` +
		strings.ReplaceAll(ib.table.sanitize(), "'", "''") + `'));` + "\n"
	if _, err := db.Exec(ctx, lock+sql); err != nil {
		return fmt.Errorf("inbox: create or upgrade table %s: %w", ib.table, err)
	}
	return nil
}
