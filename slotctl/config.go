package slotctl

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"unicode"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Defaults of Config.
const (
	DefaultTable       = "public.outbox"
	DefaultSlot        = "walbox"
	DefaultPublication = "walbox"
)

// Config names the objects slotctl checks and manages. The zero value means
// all defaults with nothing created. A Config is a plain value (Columns
// aside, which it only calls), safe to copy and to read concurrently.
//
// Names are written as stored in the catalog: unquoted and case-sensitive
// ("Outbox" is the table created as "Outbox", not outbox), matching the
// walbox configuration.
type Config struct {
	// Table is the outbox table as "schema.table", or "table" meaning
	// "public.table", or several outbox tables, comma-separated, streamed
	// through one publication and slot. Names containing a dot or a comma
	// are not supported. Default "public.outbox".
	Table string
	// Slot is the logical replication slot: [a-z0-9_]{1,63}, as Postgres
	// requires. Default "walbox".
	Slot string
	// Publication is the publication pgoutput streams. Default "walbox".
	Publication string
	// CreateMissing lets EnsurePublication and EnsureSlot create what is
	// missing, as an operator's explicit `slotctl create` or
	// `walbox run --create-slot` does. When both it and CreateOnFirstStart
	// are false they only verify and return ErrPublicationNotFound or
	// ErrSlotNotFound. A publication is never created while the slot exists
	// (see EnsurePublication). Default false.
	CreateMissing bool
	// CreateOnFirstStart is what `walbox run` uses without --create-slot:
	// create a missing publication, and create a missing slot only on a
	// clear first start, that is when the publication carries the pending
	// marker EnsurePublication wrote when it created it (see
	// PendingMarker). A slot missing under any other publication is
	// ErrSlotVanished: it was probably lost, and a new one would silently
	// skip every event committed since. Ignored when CreateMissing is set.
	// Default false.
	CreateOnFirstStart bool
	// Failover creates the slot with failover enabled and requires an
	// existing one to have it (PostgreSQL 17+; see Features). Default false.
	Failover bool
	// ReplaySlot is walbox's trailing replay slot (walbox run
	// --replay-window), which List marks as such. Default Slot+ReplaySuffix.
	ReplaySlot string
	// OtherTablesOK lets an existing publication publish tables besides
	// the outbox tables, or be FOR ALL TABLES, as Debezium accepts with
	// publication.autocreate.mode all_tables, disabled or no_tables; the
	// relay does not route their inserts (it counts and logs them).
	// Default false: such a publication is ErrPublicationMismatch.
	OtherTablesOK bool
	// NoCreatePublication never creates the publication, whatever
	// CreateMissing and CreateOnFirstStart say (Debezium's
	// publication.autocreate.mode disabled and no_tables): a missing one is
	// ErrPublicationNotFound with the CREATE PUBLICATION to run. Default
	// false.
	NoCreatePublication bool
	// Columns, when not nil, is given the outbox table's columns by
	// Preflight, so that routing which names a missing column fails before
	// the first row does. `walbox run` and `slotctl create` pass their
	// *router.Router. Default nil: no column check.
	Columns ColumnChecker
}

// ColumnChecker checks that a table has the columns its user needs.
// CheckColumns gets the table as "schema.table" and its columns in order,
// and returns an error naming what is missing and the option that names
// it. *router.Router implements it.
type ColumnChecker interface {
	CheckColumns(table string, columns []string) error
}

// WithDefaults returns c with empty names replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Slot == "" {
		c.Slot = DefaultSlot
	}
	if c.Publication == "" {
		c.Publication = DefaultPublication
	}
	return c
}

// Validate checks the names of c.WithDefaults(); empty names are valid and
// mean the defaults. Errors wrap ErrInvalidConfig.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolved is a validated Config with the tables split.
type resolved struct {
	table         TableName   // the first of tables, for messages
	tables        []TableName // at least one
	slot          string
	publication   string
	createMissing bool
	firstStart    bool // CreateOnFirstStart without CreateMissing
	failover      bool
	otherTablesOK bool
	noCreatePub   bool
	columns       ColumnChecker
}

func (c Config) resolve() (resolved, error) {
	c = c.WithDefaults()
	tables, err := ParseTableList(c.Table)
	if err := errors.Join(err, ValidateSlotName(c.Slot), validatePublication(c.Publication)); err != nil {
		return resolved{}, err
	}
	return resolved{
		table: tables[0], tables: tables, slot: c.Slot, publication: c.Publication,
		createMissing: c.CreateMissing, firstStart: c.CreateOnFirstStart && !c.CreateMissing,
		failover: c.Failover, otherTablesOK: c.OtherTablesOK, noCreatePub: c.NoCreatePublication, columns: c.Columns,
	}, nil
}

// ParseTableList parses one table name or several, comma-separated, as
// ParseTableName does each; duplicates and empty entries are errors.
// Errors wrap ErrInvalidConfig.
func ParseTableList(s string) ([]TableName, error) {
	var out []TableName
	seen := map[TableName]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			return nil, fmt.Errorf("%w: table list %q has an empty entry: expected schema.table names separated by commas", ErrInvalidConfig, s)
		}
		t, err := ParseTableName(part)
		if err != nil {
			return nil, err
		}
		if seen[t] {
			return nil, fmt.Errorf("%w: table list %q names %s twice", ErrInvalidConfig, s, t)
		}
		seen[t] = true
		out = append(out, t)
	}
	return out, nil
}

// tableList formats tables for messages ("public.a, public.b") or SQL
// (quoted) .
func tableList(tables []TableName, sql bool) string {
	parts := make([]string, len(tables))
	for i, t := range tables {
		if sql {
			parts[i] = t.Sanitize()
		} else {
			parts[i] = t.String()
		}
	}
	return strings.Join(parts, ", ")
}

// TableName is a schema-qualified table name as stored in the catalog.
type TableName struct {
	Schema string
	Name   string
}

// ParseTableName parses "schema.table" or "table" (schema public). Errors
// wrap ErrInvalidConfig.
func ParseTableName(s string) (TableName, error) {
	parts := strings.Split(s, ".")
	if len(parts) == 1 {
		parts = []string{"public", parts[0]}
	}
	if len(parts) != 2 {
		return TableName{}, fmt.Errorf("%w: table %q: expected schema.table such as public.outbox (names containing a dot are not supported)", ErrInvalidConfig, s)
	}
	for _, p := range parts {
		if why := identProblem(p); why != "" {
			return TableName{}, fmt.Errorf("%w: table %q: %q: %s", ErrInvalidConfig, s, p, why)
		}
	}
	return TableName{Schema: parts[0], Name: parts[1]}, nil
}

// String returns "schema.table", unquoted, for messages.
func (t TableName) String() string { return t.Schema + "." + t.Name }

// Sanitize returns the name quoted for SQL: "schema"."table".
func (t TableName) Sanitize() string { return pgx.Identifier{t.Schema, t.Name}.Sanitize() }

// maxIdentLen is NAMEDATALEN-1: Postgres silently truncates longer names,
// which would make us look for a different object than the one created.
const maxIdentLen = 63

func identProblem(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > maxIdentLen:
		return fmt.Sprintf("it is %d bytes long, Postgres keeps only %d", len(s), maxIdentLen)
	case strings.ContainsRune(s, ','):
		return "a comma separates outbox tables; names containing one are not supported"
	case strings.ContainsRune(s, '"'):
		return "write it without quotes, exactly as stored; names are case-sensitive here"
	}
	for _, r := range s {
		if unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Sprintf("it contains the character %q", r)
		}
	}
	return ""
}

var slotNameRE = regexp.MustCompile(`^[a-z0-9_]{1,63}$`)

// ValidateSlotName checks a replication slot name the way Postgres does:
// 1 to 63 characters among lower-case letters, digits and underscore. Errors
// wrap ErrInvalidConfig.
func ValidateSlotName(name string) error {
	if !slotNameRE.MatchString(name) {
		return fmt.Errorf("%w: slot %q: replication slot names are 1 to 63 characters of a-z, 0-9 and _", ErrInvalidConfig, name)
	}
	return nil
}

// validatePublication checks a bare publication name.
func validatePublication(name string) error {
	if why := identProblem(name); why != "" {
		return fmt.Errorf("%w: publication %q: %s", ErrInvalidConfig, name, why)
	}
	return nil
}

// Querier is what slotctl needs of a connection: *pgx.Conn, *pgxpool.Pool
// and pgx.Tx all satisfy it. It must be an ordinary session, not a
// replication connection. Creating a slot fails inside a transaction that
// has already written.
type Querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ Querier = (*pgx.Conn)(nil)
