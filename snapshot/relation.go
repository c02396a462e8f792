package snapshot

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/slotctl"
)

// TableRelation describes table the way pgoutput's Relation message does:
// the table's OID, its name, and its columns in attribute order with their
// type OIDs and modifiers, leaving out dropped and generated columns (which
// pgoutput does not send by default) and marking the replica identity's
// columns. Routing a snapshot row with it gives the record the WAL path
// gives for the same row.
func TableRelation(ctx context.Context, conn querier, table slotctl.TableName) (*decoder.Relation, error) {
	var (
		oid   uint32
		names []string
		types []uint32
		mods  []int32
		keys  []bool
	)
	err := conn.QueryRow(ctx, `
SELECT c.oid,
       array_agg(a.attname::text ORDER BY a.attnum),
       array_agg(a.atttypid::oid ORDER BY a.attnum),
       array_agg(a.atttypmod ORDER BY a.attnum),
       array_agg(COALESCE(a.attnum = ANY (i.indkey::int2[]), c.relreplident = 'f') ORDER BY a.attnum)
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped AND a.attgenerated = ''
LEFT JOIN pg_index i ON i.indrelid = c.oid
     AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))
WHERE n.nspname = $1 AND c.relname = $2
GROUP BY c.oid`, table.Schema, table.Name).Scan(&oid, &names, &types, &mods, &keys)
	if err == pgx.ErrNoRows {
		return nil, fmt.Errorf("snapshot: table %s does not exist", table)
	}
	if err != nil {
		return nil, fmt.Errorf("snapshot: read the columns of %s: %w", table, err)
	}
	rel := &decoder.Relation{ID: oid, Namespace: table.Schema, Name: table.Name, Columns: make([]decoder.Column, len(names))}
	for i := range names {
		rel.Columns[i] = decoder.Column{Name: names[i], TypeOID: types[i], TypeModifier: mods[i], Key: keys[i]}
	}
	return rel, nil
}

// selectSQL is the query of the snapshot's rows: the relation's columns
// in its order, then xmin (the writing transaction, for error messages and
// dead-letter headers), filtered and ordered as configured.
func selectSQL(rel *decoder.Relation, table slotctl.TableName, cfg Config) (string, error) {
	for _, o := range cfg.Order {
		if rel.ColumnIndex(o) < 0 {
			return "", fmt.Errorf("%w: --snapshot-order names column %q, which %s does not have (it has %s)",
				ErrInvalidConfig, o, table, columnList(rel))
		}
	}
	sql := "SELECT " + columnsSQL(rel) + " FROM " + table.Sanitize()
	if cfg.Mode == ModePending {
		sql += whereSQL(cfg.Where)
	}
	return sql + " ORDER BY " + cfg.orderBy(), nil
}

func columnList(rel *decoder.Relation) string {
	names := make([]string, len(rel.Columns))
	for i, c := range rel.Columns {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}
