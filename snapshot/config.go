package snapshot

import (
	"fmt"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/tracing"
)

// Mode says which outbox rows a takeover reads from the snapshot.
type Mode string

const (
	// ModeNone takes no snapshot (the default): the slot streams only what
	// commits after its creation.
	ModeNone Mode = "none"
	// ModePending takes the rows matching Config.Where, which is required
	// (typically "sent_at IS NULL": what the old relay has not sent yet).
	ModePending Mode = "pending"
	// ModeAll takes every row of the table.
	ModeAll Mode = "all"
)

// Modes lists the accepted values of Mode, in the order of the help text.
var Modes = []string{string(ModeNone), string(ModePending), string(ModeAll)}

// ParseMode parses --snapshot; "" means ModeNone. Errors wrap
// ErrInvalidConfig.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(strings.ToLower(strings.TrimSpace(s))); m {
	case "":
		return ModeNone, nil
	case ModeNone, ModePending, ModeAll:
		return m, nil
	}
	return "", fmt.Errorf("%w: snapshot mode %q: expected none, pending or all", ErrInvalidConfig, s)
}

// CheckWhere checks --snapshot-where against the mode: pending needs a
// condition (there is no safe guess of what "pending" means in someone
// else's table), none and all refuse one (it would be ignored). The
// condition itself is SQL and is checked by Postgres when the snapshot is
// read. Errors wrap ErrInvalidConfig.
func CheckWhere(mode Mode, where string) error {
	where = strings.TrimSpace(where)
	switch {
	case mode == ModePending && where == "":
		return fmt.Errorf("%w: --snapshot pending needs --snapshot-where naming the rows the old relay has not sent, "+
			"such as \"sent_at IS NULL\" (use --snapshot all to take every row)", ErrInvalidConfig)
	case mode != ModePending && where != "":
		return fmt.Errorf("%w: --snapshot-where is set but --snapshot is %q; it is used only with --snapshot pending", ErrInvalidConfig, mode)
	}
	return nil
}

// ParseOrder parses --snapshot-order: column names separated by commas,
// as stored in the catalog (unquoted, case-sensitive); "" means idColumn.
// Rows are read in ascending order of these columns, so choose a key that
// follows the order in which the rows were committed per aggregate (a
// bigserial id, or created_at followed by such an id); a random uuid is
// not. Errors wrap ErrInvalidConfig.
func ParseOrder(s, idColumn string) ([]string, error) {
	if strings.TrimSpace(s) == "" {
		if idColumn == "" {
			idColumn = "id"
		}
		return []string{idColumn}, nil
	}
	var out []string
	for part := range strings.SplitSeq(s, ",") {
		name := strings.TrimSpace(part)
		if why := identProblem(name); why != "" {
			return nil, fmt.Errorf("%w: --snapshot-order %q: column %q: %s", ErrInvalidConfig, s, name, why)
		}
		out = append(out, name)
	}
	return out, nil
}

func identProblem(s string) string {
	switch {
	case s == "":
		return "it is empty (write column names separated by commas)"
	case len(s) > 63:
		return "it is longer than the 63 bytes Postgres keeps"
	case strings.ContainsRune(s, '"'):
		return "write it without quotes, exactly as stored; names are case-sensitive here"
	case strings.ContainsAny(s, " \t"):
		return "a column name, not an expression (ascending order only; no ASC/DESC)"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("it contains the character %q", r)
		}
	}
	return ""
}

// Config says what a takeover reads. Build it with ParseMode, CheckWhere
// and ParseOrder.
type Config struct {
	Mode Mode
	// Where is the SQL condition of ModePending, placed in parentheses
	// after WHERE.
	Where string
	// Order are the columns the rows are read in, ascending.
	Order []string
	// BatchRows is how many rows one FETCH reads; default 1000.
	BatchRows int
	// Tracer, when set, traces the snapshot's rows that carry a trace
	// context, as replayed events (walbox.replayed).
	Tracer *tracing.Tracer
}

// orderBy renders Order for SQL, each name quoted.
func (c Config) orderBy() string {
	parts := make([]string, len(c.Order))
	for i, col := range c.Order {
		parts[i] = pgx.Identifier{col}.Sanitize()
	}
	return strings.Join(parts, ", ")
}
