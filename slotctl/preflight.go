package slotctl

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MinVersionNum is the oldest server_version_num walbox supports
// (PostgreSQL 14: pgoutput protocol 2, pg_replication_slots.wal_status and
// the settings this package reads all exist there).
const MinVersionNum = 140000

// ServerInfo is what Preflight learned about the server and the session.
type ServerInfo struct {
	VersionNum          int    // server_version_num, e.g. 150004
	Version             string // server_version, e.g. "15.4 (Debian 15.4-1)"
	WALLevel            string // wal_level: minimal, replica or logical
	MaxReplicationSlots int
	MaxWALSenders       int
	InRecovery          bool   // a standby
	Database            string // current_database()
	User                string // current_user
	Superuser           bool
	// Replication is true for a role with the REPLICATION attribute, or a
	// member of rds_replication (Amazon RDS and Aurora grant replication
	// that way).
	Replication bool
	Table       TableName
	// TableOID is the outbox table's OID, 0 when it was not found. With
	// several outbox tables, Table, TableOID and Partitioned describe the
	// first; Preflight checks them all.
	TableOID uint32
	// Partitioned is true when the outbox is a partitioned table.
	Partitioned bool
}

// Preflight checks that the server and the connected role can run walbox
// on cfg's table: PostgreSQL 14 or later, wal_level = logical, a role with
// REPLICATION (or superuser), the table exists and the role can read it,
// max_replication_slots and max_wal_senders above 0, and, when cfg.Columns
// is set, that the table has the columns it needs (its error is joined as
// returned). It runs every check it
// can and returns all failures joined, each wrapping its sentinel
// (ErrUnsupportedVersion, ErrWALLevel, ErrNoReplicationPrivilege,
// ErrTableNotFound, ErrTableNotReadable, ErrNoReplicationSlots) with the
// value found and the fix. It changes nothing. The ServerInfo is filled as
// far as it could be read, also on error.
func Preflight(ctx context.Context, conn Querier, cfg Config) (ServerInfo, error) {
	r, err := cfg.resolve()
	if err != nil {
		return ServerInfo{}, err
	}
	info, _, problems, err := preflight(ctx, conn, r)
	if err != nil {
		return info, err
	}
	return info, errors.Join(problems...)
}

// preflight is Preflight on a resolved Config. It returns the problems
// found (each wrapping its sentinel) apart from err, a failure that stopped
// the checks: the connection failed, or the server is too old for the
// other checks to mean anything (ErrUnsupportedVersion). tables holds what
// the catalog says of each of r.tables, a zero tableInfo (oid 0) for one
// that was not found.
func preflight(ctx context.Context, conn Querier, r resolved) (info ServerInfo, tables []tableInfo, problems []error, err error) {
	info, err = readServerInfo(ctx, conn)
	if err != nil {
		return info, nil, nil, err
	}
	info.Table = r.table
	if info.VersionNum < MinVersionNum {
		return info, nil, nil, fmt.Errorf("%w: server is PostgreSQL %s (server_version_num %d); walbox needs 14 or later",
			ErrUnsupportedVersion, info.Version, info.VersionNum)
	}

	var errs []error
	if info.WALLevel != "logical" {
		errs = append(errs, fmt.Errorf("%w: the server runs with wal_level = %s; set wal_level = logical in postgresql.conf "+
			"(or run ALTER SYSTEM SET wal_level = logical as a superuser) and restart PostgreSQL; "+
			"on Amazon RDS/Aurora set the parameter rds.logical_replication = 1, on Cloud SQL cloudsql.logical_decoding = on",
			ErrWALLevel, info.WALLevel))
	}
	if !info.Superuser && !info.Replication {
		errs = append(errs, fmt.Errorf("%w: role %q has neither SUPERUSER nor REPLICATION; run ALTER ROLE %s REPLICATION as a superuser "+
			"(on Amazon RDS/Aurora: GRANT rds_replication TO %s), or connect as the walbox role of migrations/003_walbox_role.sql",
			ErrNoReplicationPrivilege, info.User, pgx.Identifier{info.User}.Sanitize(), pgx.Identifier{info.User}.Sanitize()))
	}
	if info.MaxReplicationSlots == 0 {
		errs = append(errs, fmt.Errorf("%w: max_replication_slots = 0; set it to at least 1 (the default is 10) in postgresql.conf and restart PostgreSQL",
			ErrNoReplicationSlots))
	}
	if info.MaxWALSenders == 0 {
		errs = append(errs, fmt.Errorf("%w: max_wal_senders = 0, so no replication connection is accepted; set it to at least 1 (the default is 10) in postgresql.conf and restart PostgreSQL",
			ErrNoReplicationSlots))
	}

	tables = make([]tableInfo, len(r.tables))
	for i, table := range r.tables {
		t, err := lookupTable(ctx, conn, table)
		switch {
		case errors.Is(err, ErrTableNotFound):
			errs = append(errs, err)
			tables[i] = tableInfo{}
			continue
		case err != nil:
			return info, nil, nil, err // the connection failed; the other findings may be incomplete
		}
		tables[i] = t
		if i == 0 {
			info.TableOID = t.oid
			info.Partitioned = t.partitioned
		}
		if !t.readable {
			errs = append(errs, fmt.Errorf("%w: role %q cannot read %s; as its owner run GRANT USAGE ON SCHEMA %s TO %s; GRANT SELECT ON %s TO %s (see migrations/003_walbox_role.sql)",
				ErrTableNotReadable, info.User, table, pgx.Identifier{table.Schema}.Sanitize(), pgx.Identifier{info.User}.Sanitize(),
				table.Sanitize(), pgx.Identifier{info.User}.Sanitize()))
		}
		if r.columns != nil {
			columns, err := tableColumns(ctx, conn, t.oid)
			if err != nil {
				return info, nil, nil, err
			}
			if err := r.columns.CheckColumns(table.String(), columns); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return info, tables, errs, nil
}

// tableColumns lists a table's columns in order (dropped ones excluded).
func tableColumns(ctx context.Context, conn Querier, oid uint32) ([]string, error) {
	rows, err := conn.Query(ctx, `
SELECT attname::text FROM pg_attribute
WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped
ORDER BY attnum`, oid)
	if err != nil {
		return nil, fmt.Errorf("slotctl: read the columns of table oid %d: %w", oid, err)
	}
	columns, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("slotctl: read the columns of table oid %d: %w", oid, err)
	}
	return columns, nil
}

// readServerInfo reads settings and the role's attributes in one round trip.
func readServerInfo(ctx context.Context, conn Querier) (ServerInfo, error) {
	var info ServerInfo
	err := conn.QueryRow(ctx, `
SELECT current_setting('server_version_num')::int,
       current_setting('server_version'),
       current_setting('wal_level'),
       current_setting('max_replication_slots')::int,
       current_setting('max_wal_senders')::int,
       pg_is_in_recovery(),
       current_database()::text,
       current_user::text,
       r.rolsuper,
       r.rolreplication OR EXISTS (
           SELECT 1 FROM pg_roles g
           WHERE g.rolname = 'rds_replication' AND pg_has_role(r.oid, g.oid, 'MEMBER'))
FROM pg_roles r
WHERE r.rolname = current_user`).Scan(
		&info.VersionNum, &info.Version, &info.WALLevel, &info.MaxReplicationSlots, &info.MaxWALSenders,
		&info.InRecovery, &info.Database, &info.User, &info.Superuser, &info.Replication)
	if err != nil {
		return info, fmt.Errorf("slotctl: read server settings: %w", err)
	}
	return info, nil
}

// tableInfo is the catalog's view of the outbox table.
type tableInfo struct {
	oid         uint32
	partitioned bool
	readable    bool // SELECT on the table and USAGE on its schema
}

// lookupTable finds an ordinary or partitioned table by its exact name.
// ErrTableNotFound covers a missing table and a view or other relation
// kind, which a publication cannot contain.
func lookupTable(ctx context.Context, conn Querier, t TableName) (tableInfo, error) {
	var (
		info tableInfo
		kind string
	)
	err := conn.QueryRow(ctx, `
SELECT c.oid, c.relkind::text,
       has_schema_privilege(n.oid, 'USAGE') AND has_table_privilege(c.oid, 'SELECT')
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = $1 AND c.relname = $2`, t.Schema, t.Name).Scan(&info.oid, &kind, &info.readable)
	if errors.Is(err, pgx.ErrNoRows) {
		var db string
		_ = conn.QueryRow(ctx, "SELECT current_database()::text").Scan(&db) // only for the message
		return info, fmt.Errorf("%w: table %s does not exist in database %q; create it with migrations/001_outbox.sql, or name the right one with --table "+
			"(schema.table, case-sensitive, as stored in the catalog)", ErrTableNotFound, t, db)
	}
	if err != nil {
		return info, fmt.Errorf("slotctl: look up table %s: %w", t, err)
	}
	switch kind {
	case "r":
	case "p":
		info.partitioned = true
	default:
		return info, fmt.Errorf("%w: %s is a %s, not a table; a publication can only contain tables",
			ErrTableNotFound, t, relkindName(kind))
	}
	return info, nil
}

func relkindName(kind string) string {
	switch kind {
	case "v":
		return "view"
	case "m":
		return "materialized view"
	case "f":
		return "foreign table"
	case "S":
		return "sequence"
	case "i", "I":
		return "index"
	case "c":
		return "composite type"
	case "t":
		return "TOAST table"
	}
	return "relation of kind " + kind
}
