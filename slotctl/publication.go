package slotctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// PublicationInfo describes a publication as the catalog holds it.
type PublicationInfo struct {
	Name      string
	OID       uint32
	Owner     string
	AllTables bool // FOR ALL TABLES
	// Operations published (the publish option).
	Insert, Update, Delete, Truncate bool
	// ViaRoot is publish_via_partition_root: changes to partitions are
	// published as changes to their partitioned root table.
	ViaRoot bool
	// Tables are the tables whose changes are published, sorted, as
	// pg_publication_tables lists them (partitions instead of their root
	// unless ViaRoot; every table for AllTables).
	Tables []TableName
}

// InspectPublication reads a publication of the current database.
// ErrPublicationNotFound if it does not exist.
func InspectPublication(ctx context.Context, conn Querier, name string) (PublicationInfo, error) {
	if err := validatePublication(name); err != nil {
		return PublicationInfo{}, err
	}
	p := PublicationInfo{Name: name}
	err := conn.QueryRow(ctx, `
SELECT p.oid, pg_get_userbyid(p.pubowner)::text, p.puballtables,
       p.pubinsert, p.pubupdate, p.pubdelete, p.pubtruncate, p.pubviaroot
FROM pg_publication p
WHERE p.pubname = $1`, name).Scan(&p.OID, &p.Owner, &p.AllTables,
		&p.Insert, &p.Update, &p.Delete, &p.Truncate, &p.ViaRoot)
	if errors.Is(err, pgx.ErrNoRows) {
		return p, fmt.Errorf("%w: publication %q does not exist in this database", ErrPublicationNotFound, name)
	}
	if err != nil {
		return p, fmt.Errorf("slotctl: read publication %q: %w", name, err)
	}
	rows, err := conn.Query(ctx, `
SELECT schemaname::text, tablename::text
FROM pg_publication_tables
WHERE pubname = $1
ORDER BY 1, 2`, name)
	if err != nil {
		return p, fmt.Errorf("slotctl: list tables of publication %q: %w", name, err)
	}
	p.Tables, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (TableName, error) {
		var t TableName
		err := row.Scan(&t.Schema, &t.Name)
		return t, err
	})
	if err != nil {
		return p, fmt.Errorf("slotctl: list tables of publication %q: %w", name, err)
	}
	return p, nil
}

// EnsurePublication makes sure cfg's publication publishes the inserts of
// cfg's outbox tables (one or several) and, unless cfg.OtherTablesOK,
// nothing else that walbox would receive. A missing
// publication is created when cfg.CreateMissing or cfg.CreateOnFirstStart
// (see CreatePublication), else ErrPublicationNotFound; but never while
// cfg's slot exists: that is ErrPublicationNotFound advising a new
// publication with a new slot, since on PostgreSQL 14 to 17 a publication
// recreated under a live slot breaks streaming for good. An existing one
// must list exactly the table (its partitions count as the table), publish
// inserts, publish a
// partitioned table via its root, and have no row filter or column list;
// otherwise ErrPublicationMismatch says what differs and how to fix it.
// Publishing updates, deletes or truncates as well is accepted: walbox
// ignores them.
func EnsurePublication(ctx context.Context, conn Querier, cfg Config) error {
	r, err := cfg.resolve()
	if err != nil {
		return err
	}
	ts, err := lookupTables(ctx, conn, r.tables)
	if err != nil {
		return err
	}
	slotExists, err := slotExists(ctx, conn, r.slot)
	if err != nil {
		return err
	}
	pub, err := InspectPublication(ctx, conn, r.publication)
	if errors.Is(err, ErrPublicationNotFound) {
		if slotExists {
			return publicationUnderSlotError(ctx, conn, r)
		}
		if err := publicationMissingError(r); err != nil {
			return err
		}
		err = createPublication(ctx, conn, r, ts)
		if code := sqlState(err); err == nil || (code != codeDuplicateObject && code != codeUniqueViolation) {
			return err
		}
		// Created concurrently by another walbox or an admin: verify theirs.
		pub, err = InspectPublication(ctx, conn, r.publication)
	}
	if err != nil {
		return err
	}
	return checkPublication(ctx, conn, pub, r, ts, slotExists)
}

// publicationMissingError is why r's missing publication will not be
// created although the slot is missing too, or nil when it will be.
func publicationMissingError(r resolved) error {
	if r.noCreatePub {
		return fmt.Errorf("%w: publication %q does not exist, and the configuration says not to create it (Debezium's publication.autocreate.mode disabled or no_tables); "+
			"create it as the owner of the outbox tables: CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert'), or set publication.autocreate.mode=filtered",
			ErrPublicationNotFound, r.publication, pgx.Identifier{r.publication}.Sanitize(), tableList(r.tables, true))
	}
	if !r.createMissing && !r.firstStart {
		return fmt.Errorf("%w: publication %q does not exist; create it with `slotctl create`, or have an admin run migrations/002_publication.sql", ErrPublicationNotFound, r.publication)
	}
	return nil
}

// lookupTables looks up every outbox table; the errors of all missing
// ones are joined.
func lookupTables(ctx context.Context, conn Querier, tables []TableName) ([]tableInfo, error) {
	out := make([]tableInfo, len(tables))
	var errs []error
	for i, table := range tables {
		t, err := lookupTable(ctx, conn, table)
		if err != nil && !errors.Is(err, ErrTableNotFound) {
			return nil, err
		}
		errs = append(errs, err)
		out[i] = t
	}
	return out, errors.Join(errs...)
}

// slotExists reports whether a pgoutput slot of that name exists in the
// current database, the only kind that streams its publications. (A slot
// of another kind or database is EnsureSlot's to report.)
func slotExists(ctx context.Context, conn Querier, slot string) (bool, error) {
	var exists bool
	err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots
		WHERE slot_name = $1 AND slot_type = 'logical' AND plugin = $2 AND database = current_database())`, slot, Plugin).Scan(&exists)
	if err != nil {
		return false, fmt.Errorf("slotctl: look up slot %q: %w", slot, err)
	}
	return exists, nil
}

// publicationUnderSlotError refuses to create a publication under an
// existing slot. pgoutput reads the publication through the catalog as it
// was when each change was written, so on PostgreSQL 14 to 17 every change
// between the slot's position and the new publication fails with
// "publication does not exist", and only dropping the slot gets past it.
//
// A slot that has decoded nothing yet (pg_stat_replication_slots) was
// most likely created before the publication on purpose: Patroni creates
// the permanent slots of its `slots:` configuration at bootstrap, before
// any schema exists. Then the fix is the publication alone, and moving the
// slot past it: a new slot would not survive a Patroni failover (Patroni
// drops slots it does not manage on its replicas).
func publicationUnderSlotError(ctx context.Context, conn Querier, r resolved) error {
	create := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
		pgx.Identifier{r.publication}.Sanitize(), tableList(r.tables, true))
	cutOver := fmt.Sprintf("cut over to a NEW publication with a NEW slot: start walbox with --publication %s --slot %s (new names; it creates both; "+
		"under Patroni declare the new slot in its slots: first and let Patroni create it), "+
		"re-publish the outbox rows committed since the last event your consumers received (consumers deduplicate by event_id), "+
		"then drop the old slot, which holds WAL back: `slotctl drop --slot %s`", newName(r.publication), newName(r.slot), r.slot)
	if neverDecoded(ctx, conn, r.slot) {
		return fmt.Errorf("%w: publication %q does not exist but slot %q does, and the slot has decoded no transaction yet "+
			"(pg_stat_replication_slots.total_txns = 0): it was probably created before the publication, as Patroni creates the permanent slots of its slots: "+
			"configuration at bootstrap. Stop walbox, and stop the outbox's writers until the advance below returns: "+
			"the advance skips every row committed before it, including rows written after the publication was created. "+
			"Create only the publication, as the owner of %s: %s; "+
			"then move the slot past it, so that no change written before the publication is decoded against it "+
			"(on PostgreSQL 14 to 17 streaming would fail on such a change with \"publication does not exist\"): "+
			"SELECT pg_replication_slot_advance(%s, pg_current_wal_lsn()) (under Patroni, on the primary; Patroni moves its replicas' copies). "+
			"Outbox rows committed before the advance are not streamed; re-publish any there are. "+
			"walbox does not create the publication itself under an existing slot. "+
			"If instead the publication was dropped under a slot that streamed (and its statistics were reset since), %s",
			ErrPublicationNotFound, r.publication, r.slot, tableList(r.tables, false), create, quoteLiteral(r.slot), cutOver)
	}
	return fmt.Errorf("%w: publication %q does not exist but slot %q does; walbox will not create the publication under the live slot: "+
		"on PostgreSQL 14 to 17 streaming would then fail on every change written before it (\"publication does not exist\") "+
		"and only dropping the slot would get past them; events committed since the publication was dropped cannot be streamed from this slot. "+
		"Cut over instead to a NEW publication with a NEW slot: start walbox with --publication %s --slot %s (new names; it creates both; "+
		"under Patroni declare the new slot in its slots: first), "+
		"re-publish the outbox rows committed since the last event your consumers received (consumers deduplicate by event_id), "+
		"then drop the old slot, which holds WAL back: `slotctl drop --slot %s`",
		ErrPublicationNotFound, r.publication, r.slot, newName(r.publication), newName(r.slot), r.slot)
}

// neverDecoded reports whether the slot's statistics show no decoded
// transaction (PostgreSQL 14+); false when they cannot be read.
func neverDecoded(ctx context.Context, conn Querier, slot string) bool {
	var txns int64
	err := conn.QueryRow(ctx, `SELECT COALESCE((SELECT total_txns FROM pg_catalog.pg_stat_replication_slots WHERE slot_name = $1), 0)`, slot).Scan(&txns)
	return err == nil && txns == 0
}

// newName suggests a name for a replacement object.
func newName(old string) string {
	if len(old)+2 > maxIdentLen {
		old = old[:maxIdentLen-2]
	}
	return old + "_2"
}

// checkPublication compares an existing publication with what walbox needs.
// The fixes it advises never drop the publication: slotExists or not,
// another consumer may stream it.
func checkPublication(ctx context.Context, conn Querier, pub PublicationInfo, r resolved, ts []tableInfo, slotExists bool) error {
	name := pgx.Identifier{pub.Name}.Sanitize()
	setTable := fmt.Sprintf("ALTER PUBLICATION %s SET TABLE %s", name, tableList(r.tables, true))
	var diffs, fixes []string
	addFix := func(f string) {
		for _, have := range fixes {
			if have == f {
				return
			}
		}
		fixes = append(fixes, f)
	}

	if pub.AllTables && !r.otherTablesOK {
		diffs = append(diffs, "is FOR ALL TABLES, so walbox would receive the inserts of every table")
	} else if !pub.AllTables {
		oids := make([]uint32, len(ts))
		for i, t := range ts {
			oids[i] = t.oid
		}
		ours, extra, err := publicationMembers(ctx, conn, pub.Name, oids)
		if err != nil {
			return err
		}
		var missing []string
		for i, in := range ours {
			if !in {
				missing = append(missing, r.tables[i].String())
			}
		}
		if len(missing) > 0 {
			diffs = append(diffs, fmt.Sprintf("does not include %s", strings.Join(missing, ", ")))
			if r.otherTablesOK {
				addFix(fmt.Sprintf("ALTER PUBLICATION %s ADD TABLE %s", name, strings.Join(sanitizeAll(missing), ", ")))
			} else {
				addFix(setTable)
			}
		}
		if len(extra) > 0 && !r.otherTablesOK {
			diffs = append(diffs, fmt.Sprintf("also publishes %s", strings.Join(extra, ", ")))
			addFix(setTable)
		}
		for i, t := range ts {
			filtered, columns, err := publicationFilters(ctx, conn, pub.OID, t.oid)
			if err != nil {
				return err
			}
			if filtered {
				diffs = append(diffs, fmt.Sprintf("filters the rows of %s with a WHERE clause, so walbox would silently miss events", r.tables[i]))
				addFix(setTable)
			}
			if columns {
				diffs = append(diffs, fmt.Sprintf("publishes only some columns of %s", r.tables[i]))
				addFix(setTable)
			}
		}
	}
	if !pub.Insert {
		diffs = append(diffs, "does not publish inserts")
		addFix(fmt.Sprintf("ALTER PUBLICATION %s SET (publish = 'insert')", name))
	}
	for i, t := range ts {
		if t.partitioned && !pub.ViaRoot {
			diffs = append(diffs, fmt.Sprintf("publishes the partitions of %s under their own names", r.tables[i]))
			addFix(fmt.Sprintf("ALTER PUBLICATION %s SET (publish_via_partition_root = true)", name))
		}
	}
	if len(diffs) == 0 {
		return nil
	}
	if pub.AllTables && !r.otherTablesOK {
		// The ALTERs would not help: the new publication replaces this one.
		return fmt.Errorf("%w: publication %q %s; %s",
			ErrPublicationMismatch, pub.Name, strings.Join(diffs, "; "), allTablesFix(r, slotExists))
	}
	return fmt.Errorf("%w: publication %q %s; fix it as its owner with: %s; or choose another publication with --publication",
		ErrPublicationMismatch, pub.Name, strings.Join(diffs, "; "), strings.Join(fixes, "; "))
}

// sanitizeAll quotes "schema.table" names for SQL.
func sanitizeAll(names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		t, _ := ParseTableName(n)
		out[i] = t.Sanitize()
	}
	return out
}

// allTablesFix advises how to leave a FOR ALL TABLES publication, which
// cannot be narrowed. Dropping and recreating it under a live slot breaks
// streaming (see publicationUnderSlotError), so the advice is a new
// publication, and with an existing slot a new slot too.
func allTablesFix(r resolved, slotExists bool) string {
	pub := newName(r.publication)
	create := fmt.Sprintf("as the owner of %s, CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
		tableList(r.tables, false), pgx.Identifier{pub}.Sanitize(), tableList(r.tables, true))
	if !slotExists {
		return fmt.Sprintf("a FOR ALL TABLES publication cannot be narrowed: %s and use it with --publication %s", create, pub)
	}
	return fmt.Sprintf("a FOR ALL TABLES publication cannot be narrowed, and dropping and recreating it under the live slot %q "+
		"would break streaming; cut over to a new publication with a NEW slot: %s, start walbox with --publication %s --slot %s, "+
		"re-publish the outbox rows committed since the last event your consumers received (consumers deduplicate by event_id), "+
		"then drop the old slot with `slotctl drop --slot %s`", r.slot, create, pub, newName(r.slot), r.slot)
}

// publicationMembers reports, for each table OID, whether the publication
// covers it (directly or through its partitions), and lists the other
// tables it covers.
func publicationMembers(ctx context.Context, conn Querier, pub string, tableOIDs []uint32) (ours []bool, extra []string, err error) {
	rows, err := conn.Query(ctx, `
SELECT pt.schemaname::text || '.' || pt.tablename::text, c.oid, COALESCE(pg_partition_root(c.oid)::oid, c.oid)
FROM pg_publication_tables pt
JOIN pg_namespace n ON n.nspname = pt.schemaname
JOIN pg_class c ON c.relnamespace = n.oid AND c.relname = pt.tablename
WHERE pt.pubname = $1
ORDER BY 1`, pub)
	if err != nil {
		return nil, nil, fmt.Errorf("slotctl: list tables of publication %q: %w", pub, err)
	}
	defer rows.Close()
	ours = make([]bool, len(tableOIDs))
	for rows.Next() {
		var (
			name      string
			oid, root uint32
		)
		if err := rows.Scan(&name, &oid, &root); err != nil {
			return nil, nil, fmt.Errorf("slotctl: list tables of publication %q: %w", pub, err)
		}
		isOur := false
		for i, o := range tableOIDs {
			if o == oid || o == root {
				ours[i], isOur = true, true
			}
		}
		if !isOur {
			extra = append(extra, name)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("slotctl: list tables of publication %q: %w", pub, err)
	}
	return ours, extra, nil
}

// publicationFilters reports a row filter or column list (PostgreSQL 15+) on
// the table's entry in the publication.
func publicationFilters(ctx context.Context, conn Querier, pubOID, tableOID uint32) (filtered, columns bool, err error) {
	var version int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil {
		return false, false, fmt.Errorf("slotctl: read server version: %w", err)
	}
	if version < 150000 {
		return false, false, nil // neither exists before 15
	}
	err = conn.QueryRow(ctx, `
SELECT pr.prqual IS NOT NULL, pr.prattrs IS NOT NULL
FROM pg_publication_rel pr
WHERE pr.prpubid = $1 AND pr.prrelid = $2`, pubOID, tableOID).Scan(&filtered, &columns)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false, nil // covered through FOR TABLES IN SCHEMA, or not at all
	}
	if err != nil {
		return false, false, fmt.Errorf("slotctl: read publication filters: %w", err)
	}
	return filtered, columns, nil
}

// CreatePublication creates cfg's publication for cfg's tables, publishing
// inserts only (and via the root for a partitioned table):
//
//	CREATE PUBLICATION "walbox" FOR TABLE "public"."outbox" WITH (publish = 'insert');
//	COMMENT ON PUBLICATION "walbox" IS 'walbox: slot walbox pending'
//
// in one transaction; the comment is cfg.Slot's PendingMarker, which
// EnsureSlot removes once the slot exists. It does not check cfg's slot:
// EnsurePublication does.
//
// PostgreSQL requires the role to own the table (and have CREATE on the
// database); otherwise ErrPublicationPrivilege says to have an admin run
// migrations/002_publication.sql. The error of an existing publication
// carries SQLSTATE 42710.
func CreatePublication(ctx context.Context, conn Querier, cfg Config) error {
	r, err := cfg.resolve()
	if err != nil {
		return err
	}
	ts, err := lookupTables(ctx, conn, r.tables)
	if err != nil {
		return err
	}
	return createPublication(ctx, conn, r, ts)
}

func createPublication(ctx context.Context, conn Querier, r resolved, ts []tableInfo) error {
	with := "publish = 'insert'"
	partitioned := false
	for _, t := range ts {
		partitioned = partitioned || t.partitioned
	}
	if partitioned {
		// Without it, rows arrive under each partition's name, not the outbox's.
		with += ", publish_via_partition_root = true"
	}
	// Two statements in one simple-protocol query run as one transaction:
	// the publication never exists without the pending marker, so a process
	// dying before it creates the slot is recognised on the next start.
	// (pgx sends a query without arguments with the simple protocol.)
	name := pgx.Identifier{r.publication}.Sanitize()
	sql := fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (%s); COMMENT ON PUBLICATION %s IS %s",
		name, tableList(r.tables, true), with, name, quoteLiteral(PendingMarker(r.slot)))
	_, err := conn.Exec(ctx, sql)
	switch sqlState(err) {
	case "":
		if err != nil {
			return fmt.Errorf("slotctl: create publication %q: %w", r.publication, err)
		}
		return nil
	case codeInsufficientPrivilege:
		return fmt.Errorf("%w: %w", publicationPrivilegeError(r), err)
	case codeUndefinedTable:
		return fmt.Errorf("%w: table %s: %w", ErrTableNotFound, tableList(r.tables, false), err)
	default:
		return fmt.Errorf("slotctl: create publication %q: %w", r.publication, err)
	}
}

// publicationPrivilegeError says that the role may not create r's
// publication, and who can.
func publicationPrivilegeError(r resolved) error {
	return fmt.Errorf("%w: creating publication %q needs ownership of %s and CREATE on the database; "+
		"have an admin run migrations/002_publication.sql, or run `slotctl create` as the table's owner",
		ErrPublicationPrivilege, r.publication, tableList(r.tables, false))
}

// DropPublication drops a publication of the current database.
// ErrPublicationNotFound if there is none; ErrPublicationPrivilege unless
// the role owns it. A slot streaming it fails on its next change afterwards.
func DropPublication(ctx context.Context, conn Querier, name string) error {
	if err := validatePublication(name); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "DROP PUBLICATION "+pgx.Identifier{name}.Sanitize())
	switch sqlState(err) {
	case "":
		if err != nil {
			return fmt.Errorf("slotctl: drop publication %q: %w", name, err)
		}
		return nil
	case codeUndefinedObject:
		return fmt.Errorf("%w: publication %q does not exist in this database", ErrPublicationNotFound, name)
	case codeInsufficientPrivilege:
		return fmt.Errorf("%w: only the owner of publication %q (or a superuser) may drop it: %w", ErrPublicationPrivilege, name, err)
	default:
		return fmt.Errorf("slotctl: drop publication %q: %w", name, err)
	}
}
