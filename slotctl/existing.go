package slotctl

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// ExistingRowsLimit bounds ExistingRows' count of each table, so that
// counting a large outbox stays cheap: past it the count is "more than".
const ExistingRowsLimit = 1000

// TableRows is how many rows an outbox table held, counted by ExistingRows.
type TableRows struct {
	Table TableName
	// Rows is the count, at most ExistingRowsLimit.
	Rows int64
	// More means the table held more than Rows (Rows = ExistingRowsLimit).
	More bool
}

// ExistingRows counts the rows of cfg's outbox tables, each up to
// ExistingRowsLimit (a bounded scan, not count(*) over the table), and
// returns the tables that hold any. Callers count just before they create
// a slot, to warn with UnsentWarning: a new slot streams only transactions
// that commit after its creation, so rows already in the table are never
// sent by it. Rows committed while the slot is being created are not
// counted, so the count is a lower bound.
func ExistingRows(ctx context.Context, conn Querier, cfg Config) ([]TableRows, error) {
	r, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	var out []TableRows
	for _, t := range r.tables {
		var n int64
		sql := "SELECT count(*) FROM (SELECT 1 FROM " + t.Sanitize() + " LIMIT " + strconv.Itoa(ExistingRowsLimit+1) + ") s"
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			return out, fmt.Errorf("slotctl: count the rows of %s: %w", t, err)
		}
		if n == 0 {
			continue
		}
		tr := TableRows{Table: t, Rows: n}
		if n > ExistingRowsLimit {
			tr.Rows, tr.More = ExistingRowsLimit, true
		}
		out = append(out, tr)
	}
	return out, nil
}

// UnsentWarning says, in one line, that the rows r counted will not be
// sent by the new slot, and how to send them: re-insert them now that the
// slot exists, or drop the slot and let walbox create it again with a
// takeover snapshot (walbox run --create-slot --snapshot all).
func (r TableRows) UnsentWarning(slot string) string {
	n := strconv.FormatInt(r.Rows, 10) + " rows"
	switch {
	case r.More:
		n = "more than " + n
	case r.Rows == 1:
		n = "1 row"
	}
	t := r.Table.sqlName()
	return fmt.Sprintf("%s already holds %s, committed before slot %q was created: a slot streams only transactions "+
		"committed after its creation, so these rows will not be sent. "+
		"To send them, re-insert them now, as the table's owner, in the order they were written "+
		"(`WITH moved AS (DELETE FROM %s RETURNING *) INSERT INTO %s SELECT * FROM moved ORDER BY created_at, id`; "+
		"the publication publishes inserts only, so the delete is not sent), "+
		"or drop the slot (`slotctl drop --slot %s`) and start walbox once with `--create-slot --snapshot all`, "+
		"which sends them from the new slot's snapshot before streaming (see \"Replace your polling relay\"); "+
		"if a polling relay sent some of them already, send only the rest with `--snapshot pending --snapshot-where` and its condition (such as `sent_at IS NULL`)",
		r.Table, n, slot, t, t, slot)
}

// plainIdent is an identifier SQL takes unquoted as written.
var plainIdent = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// sqlName is t for SQL a human copies from a message: quoted only where
// needed, so that public.outbox reads as such (and as such in a JSON log).
func (t TableName) sqlName() string {
	part := func(s string) string {
		if plainIdent.MatchString(s) {
			return s
		}
		return pgx.Identifier{s}.Sanitize()
	}
	return part(t.Schema) + "." + part(t.Name)
}
