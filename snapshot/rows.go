package snapshot

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/slotctl"
)

// RowSelect says which rows of an outbox table ReadRows reads, and in
// which order.
type RowSelect struct {
	Table slotctl.TableName
	// Where is an SQL condition, placed in parentheses after WHERE; empty
	// selects every row. It may refer to Args as $1, $2, ...
	Where string
	// Args are the values of $1, $2, ... in Where, sent as query
	// parameters in text form (never pasted into the SQL); the server
	// infers their types from the expression they are compared with.
	Args []string
	// Order are the columns the rows are read in, ascending; at least one.
	Order []string
	// BatchRows is how many rows one FETCH reads; default 1000.
	BatchRows int
}

// CountRows counts the rows sel selects, in tx's snapshot.
func CountRows(ctx context.Context, tx pgx.Tx, sel RowSelect) (int64, error) {
	sql := "SELECT count(*) FROM " + sel.Table.Sanitize()
	if sel.Where != "" {
		sql += whereSQL(sel.Where)
	}
	rr := tx.Conn().PgConn().ExecParams(ctx, sql, textArgs(sel.Args), nil, nil, nil)
	var n int64
	for rr.NextRow() {
		v, err := strconv.ParseInt(string(rr.Values()[0]), 10, 64)
		if err != nil {
			rr.Close()
			return 0, fmt.Errorf("snapshot: count the rows of %s: %w", sel.Table, err)
		}
		n = v
	}
	if _, err := rr.Close(); err != nil {
		return 0, err
	}
	return n, nil
}

// ReadRows reads the rows sel selects in tx (whose snapshot they are
// read in: make it REPEATABLE READ so every batch sees the same rows)
// through a cursor, sel.BatchRows rows per FETCH, in sel.Order, and calls
// each with every row as a decoder.Insert of rel (as TableRelation
// returns it): the values in text form exactly as pgoutput sends them,
// XID the row's xmin, LSN and CommitLSN zero. The Insert and its values
// are the callee's to keep. It returns the number of rows read; an error
// of each stops it and is returned as is. The cursor is closed before it
// returns.
func ReadRows(ctx context.Context, tx pgx.Tx, rel *decoder.Relation, sel RowSelect, each func(*decoder.Insert) error) (int64, error) {
	sql, err := rowsSQL(rel, sel)
	if err != nil {
		return 0, err
	}
	pc := tx.Conn().PgConn()
	rr := pc.ExecParams(ctx, "DECLARE walbox_rows NO SCROLL CURSOR FOR "+sql, textArgs(sel.Args), nil, nil, nil)
	if _, err := rr.Close(); err != nil {
		return 0, err
	}
	batch := sel.BatchRows
	if batch <= 0 {
		batch = DefaultBatchRows
	}
	fetch := "FETCH " + strconv.Itoa(batch) + " FROM walbox_rows"
	var total int64
	for {
		rr := pc.ExecParams(ctx, fetch, nil, nil, nil, nil)
		n := 0
		for rr.NextRow() {
			ins, err := rowInsert(rel, sel.Table, rr.Values())
			if err == nil {
				err = each(ins)
			}
			if err != nil {
				rr.Close()
				return total, err
			}
			n++
			total++
		}
		if _, err := rr.Close(); err != nil {
			return total, fmt.Errorf("snapshot: read rows of %s: %w", sel.Table, err)
		}
		if n < batch {
			break
		}
	}
	if _, err := tx.Exec(ctx, "CLOSE walbox_rows"); err != nil {
		return total, fmt.Errorf("snapshot: close the cursor over %s: %w", sel.Table, err)
	}
	return total, nil
}

// rowsSQL is the query of ReadRows: the relation's columns in its order,
// then xmin, filtered and ordered as sel says.
func rowsSQL(rel *decoder.Relation, sel RowSelect) (string, error) {
	if len(sel.Order) == 0 {
		return "", fmt.Errorf("%w: no column to read the rows of %s in", ErrInvalidConfig, sel.Table)
	}
	for _, o := range sel.Order {
		if rel.ColumnIndex(o) < 0 {
			return "", fmt.Errorf("%w: --snapshot-order names column %q, which %s does not have (it has %s)",
				ErrInvalidConfig, o, sel.Table, columnList(rel))
		}
	}
	sql := "SELECT " + columnsSQL(rel) + " FROM " + sel.Table.Sanitize()
	if sel.Where != "" {
		sql += whereSQL(sel.Where)
	}
	return sql + " ORDER BY " + Config{Order: sel.Order}.orderBy(), nil
}

// columnsSQL lists rel's columns, quoted, then the row's xmin.
func columnsSQL(rel *decoder.Relation) string {
	cols := make([]string, 0, len(rel.Columns)+1)
	for _, c := range rel.Columns {
		cols = append(cols, pgx.Identifier{c.Name}.Sanitize())
	}
	return strings.Join(append(cols, "xmin::text::bigint"), ", ")
}

// rowInsert turns a row of columnsSQL, in text format, into an Insert of
// rel; the values are copied (the result reader reuses its buffer).
func rowInsert(rel *decoder.Relation, table slotctl.TableName, vals [][]byte) (*decoder.Insert, error) {
	width := len(rel.Columns)
	if len(vals) != width+1 {
		return nil, fmt.Errorf("snapshot: a row of %s has %d columns, expected %d", table, len(vals), width+1)
	}
	ins := &decoder.Insert{Relation: rel, Values: make([]decoder.Value, width)}
	if xmin, err := strconv.ParseUint(string(vals[width]), 10, 32); err == nil {
		ins.XID = uint32(xmin)
	}
	for i := range width {
		if vals[i] == nil {
			ins.Values[i] = decoder.Value{Kind: decoder.KindNull}
			continue
		}
		ins.Values[i] = decoder.Value{Kind: decoder.KindText, Data: append(make([]byte, 0, len(vals[i])), vals[i]...)}
	}
	return ins, nil
}

func textArgs(args []string) [][]byte {
	if len(args) == 0 {
		return nil
	}
	out := make([][]byte, len(args))
	for i, a := range args {
		out[i] = []byte(a)
	}
	return out
}

// whereSQL is the WHERE clause of an operator's condition. The newline
// ends a trailing "-- comment" of it, which would otherwise swallow the
// closing parenthesis.
func whereSQL(where string) string { return " WHERE (" + where + "\n)" }

// scanInt runs sql, a query of one integer, with the extended protocol.
func scanInt(ctx context.Context, tx pgx.Tx, sql string, n *int64) error {
	rr := tx.Conn().PgConn().ExecParams(ctx, sql, nil, nil, nil, nil)
	for rr.NextRow() {
		v, err := strconv.ParseInt(string(rr.Values()[0]), 10, 64)
		if err != nil {
			rr.Close()
			return err
		}
		*n = v
	}
	_, err := rr.Close()
	return err
}
