package eventrouter

import (
	"context"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/decoder"
)

// Postgres type OIDs Debezium mode converts (pg_type.dat; fixed on every
// installation).
const (
	oidBool        = 16
	oidBytea       = 17
	oidName        = 19
	oidInt8        = 20
	oidInt2        = 21
	oidInt4        = 23
	oidText        = 25
	oidJSON        = 114
	oidBpchar      = 1042
	oidVarchar     = 1043
	oidTimestamp   = 1114
	oidTimestamptz = 1184
	oidUUID        = 2950
	oidJSONB       = 3802
)

// Debezium's logical schema names (io.debezium.data.*, io.debezium.time.*),
// all at version 1.
const (
	nameUUID           = "io.debezium.data.Uuid"
	nameJSON           = "io.debezium.data.Json"
	nameTimestamp      = "io.debezium.time.Timestamp"
	nameMicroTimestamp = "io.debezium.time.MicroTimestamp"
	nameZonedTimestamp = "io.debezium.time.ZonedTimestamp"
)

// ColumnInfo is what Debezium reads from the catalog about a column and
// pgoutput does not send: whether it is NOT NULL, which makes its Connect
// schema required ("optional":false), and its DEFAULT expression, which
// Debezium turns into the schema's default value: JsonConverter writes it
// into the schema, and a NULL in the row reads as the default.
type ColumnInfo struct {
	Name    string
	NotNull bool
	// Default is pg_get_expr of the column default, "" for none.
	Default string
}

// Querier is the part of *pgx.Conn or *pgxpool.Pool LoadColumns uses.
type Querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}

var _ Querier = (*pgx.Conn)(nil)

// LoadColumns reads the nullability of every column of the given tables
// ("schema.table") for Config.Columns, so that schemas in JsonConverter
// output say "optional" exactly as Debezium's do. A table that does not
// exist is an error naming it.
func LoadColumns(ctx context.Context, q Querier, tables []string) (map[string][]ColumnInfo, error) {
	out := make(map[string][]ColumnInfo, len(tables))
	for _, t := range tables {
		schemaName, table, ok := strings.Cut(t, ".")
		if !ok {
			return nil, fmt.Errorf("eventrouter: table %q is not schema.table; fix table.include.list", t)
		}
		rows, err := q.Query(ctx, `SELECT a.attname, a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '')
			FROM pg_catalog.pg_attribute a
			JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
			JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			LEFT JOIN pg_catalog.pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
			WHERE n.nspname = $1 AND c.relname = $2 AND a.attnum > 0 AND NOT a.attisdropped
			ORDER BY a.attnum`, schemaName, table)
		if err != nil {
			return nil, fmt.Errorf("eventrouter: read the columns of %s: %w", t, err)
		}
		cols, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (ColumnInfo, error) {
			var c ColumnInfo
			err := r.Scan(&c.Name, &c.NotNull, &c.Default)
			return c, err
		})
		if err != nil {
			return nil, fmt.Errorf("eventrouter: read the columns of %s: %w", t, err)
		}
		if len(cols) == 0 {
			return nil, fmt.Errorf("eventrouter: table %s does not exist (or has no columns); create it or fix table.include.list", t)
		}
		out[t] = cols
	}
	return out, nil
}

// columnSchema is the Connect schema Debezium's Postgres connector gives a
// column with its default settings (decimal.handling.mode=precise,
// time.precision.mode=adaptive, binary.handling.mode=bytes), or an error
// naming the type walbox does not convert.
func columnSchema(c *decoder.Column, optional bool) (*schema, error) {
	s := &schema{optional: optional}
	switch c.TypeOID {
	case oidText, oidVarchar, oidBpchar, oidName:
		s.typ = kString
	case oidUUID:
		s.typ, s.name, s.version = kString, nameUUID, 1
	case oidJSON, oidJSONB:
		s.typ, s.name, s.version = kString, nameJSON, 1
	case oidInt2:
		s.typ = kInt16
	case oidInt4:
		s.typ = kInt32
	case oidInt8:
		s.typ = kInt64
	case oidBool:
		s.typ = kBool
	case oidBytea:
		s.typ = kBytes
	case oidTimestamp:
		// typmod is the precision; -1 means the default, 6.
		if c.TypeModifier >= 0 && c.TypeModifier <= 3 {
			s.typ, s.name, s.version = kInt64, nameTimestamp, 1
		} else {
			s.typ, s.name, s.version = kInt64, nameMicroTimestamp, 1
		}
	case oidTimestamptz:
		s.typ, s.name, s.version = kString, nameZonedTimestamp, 1
	default:
		return nil, fmt.Errorf("column %q has type OID %d, which Debezium mode does not convert "+
			"(supported: text, varchar, char, uuid, json, jsonb, smallint, integer, bigint, boolean, bytea, timestamp, timestamptz)",
			c.Name, c.TypeOID)
	}
	return s, nil
}

// columnValue converts a column's pgoutput text form to the value Debezium
// puts into the record's Struct for schema s.
func columnValue(c *decoder.Column, s *schema, v *decoder.Value) (any, error) {
	switch v.Kind {
	case decoder.KindNull:
		return nil, nil
	case decoder.KindText:
	case decoder.KindBinary:
		return nil, fmt.Errorf("column %q arrived in binary form, which walbox does not request", c.Name)
	default:
		return nil, fmt.Errorf("column %q is an unchanged TOAST value, which an INSERT cannot carry", c.Name)
	}
	text := string(v.Data)
	switch c.TypeOID {
	case oidInt2:
		n, err := strconv.ParseInt(text, 10, 16)
		return int16(n), wrapParse(c, text, err)
	case oidInt4:
		n, err := strconv.ParseInt(text, 10, 32)
		return int32(n), wrapParse(c, text, err)
	case oidInt8:
		n, err := strconv.ParseInt(text, 10, 64)
		return n, wrapParse(c, text, err)
	case oidBool:
		switch text {
		case "t":
			return true, nil
		case "f":
			return false, nil
		}
		return nil, fmt.Errorf("column %q: boolean text %q is neither t nor f", c.Name, text)
	case oidBytea:
		b, err := decoder.DecodeBytea(v.Data)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.Name, err)
		}
		return b, nil
	case oidTimestamp:
		t, err := parseTimestamp(text, false)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.Name, err)
		}
		if s.name == nameTimestamp {
			return t.UnixMilli(), nil
		}
		return t.UnixMicro(), nil
	case oidTimestamptz:
		t, err := parseTimestamp(text, true)
		if err != nil {
			return nil, fmt.Errorf("column %q: %w", c.Name, err)
		}
		return zonedTimestamp(t, c.TypeModifier), nil
	}
	return text, nil
}

func wrapParse(c *decoder.Column, text string, err error) error {
	if err != nil {
		return fmt.Errorf("column %q: %q is not an integer of its type: %w", c.Name, text, err)
	}
	return nil
}

// parseTimestamp reads Postgres' ISO text output of timestamp
// ("2006-01-02 15:04:05.999999") or timestamptz (with "+hh[:mm[:ss]]").
func parseTimestamp(text string, zoned bool) (time.Time, error) {
	switch text {
	case "infinity", "-infinity":
		return time.Time{}, fmt.Errorf("timestamp %q is not a point in time walbox converts", text)
	}
	if strings.HasSuffix(text, " BC") {
		return time.Time{}, fmt.Errorf("timestamp %q is before the common era, which walbox does not convert", text)
	}
	layout := "2006-01-02 15:04:05.999999"
	if zoned {
		// Offsets print as +hh, +hh:mm or +hh:mm:ss; normalise to the last.
		i := strings.LastIndexAny(text, "+-")
		if i < 10 {
			return time.Time{}, fmt.Errorf("timestamptz %q has no UTC offset", text)
		}
		off := text[i:]
		switch len(off) {
		case 3:
			off += ":00:00"
		case 6:
			off += ":00"
		}
		text = text[:i] + off
		layout = "2006-01-02 15:04:05.999999-07:00:00"
	}
	t, err := time.Parse(layout, text)
	if err != nil {
		return time.Time{}, fmt.Errorf("timestamp %q is not in Postgres' ISO output format (DateStyle ISO): %w", text, err)
	}
	return t.UTC(), nil
}

// zonedTimestamp is io.debezium.time.ZonedTimestamp's text: ISO-8601 in
// UTC with exactly the column's precision in fractional digits (typmod; 6
// when the column has none), or, for precision 0, ISO_OFFSET_DATE_TIME's
// minimal fraction.
func zonedTimestamp(t time.Time, typmod int32) string {
	precision := int(typmod)
	if precision < 0 {
		precision = 6
	}
	t = t.UTC()
	if precision < 1 || precision > 9 {
		return t.Format("2006-01-02T15:04:05.999999999Z")
	}
	return t.Format("2006-01-02T15:04:05." + strings.Repeat("0", precision) + "Z")
}

// Debezium's PostgresDefaultValueConverter patterns: a default that calls a
// function, or is one of the SQL current date/time keywords, becomes a fixed
// placeholder; a quoted literal becomes its text.
var (
	functionDefault = regexp.MustCompile(`^[(]?[A-Za-z0-9_.]+\((?:.+(?:, ?.+)*)?\)`)
	literalDefault  = regexp.MustCompile(`'(.*?)'`)
	currentDateTime = []string{"current_timestamp", "current_time", "current_date", "localtime", "localtimestamp"}
)

// extractDefault is PostgresDefaultValueConverter.extractDefault; ok is
// false for a NULL default.
func extractDefault(expr, placeholder string) (string, bool) {
	if functionDefault.MatchString(expr) || slices.Contains(currentDateTime, strings.ToLower(expr)) {
		return placeholder, true
	}
	if strings.Contains(expr, "'") {
		m := literalDefault.FindStringSubmatch(expr)
		if m == nil {
			return "", false // Matcher.group after a failed find throws: no default
		}
		return m[1], true
	}
	if strings.HasPrefix(expr, "NULL::") {
		return "", false
	}
	return expr, true
}

// columnDefault is the value Debezium puts into a column's schema as its
// default for the DEFAULT expression expr, or nil for none (no default, a
// NULL default, or one Debezium cannot parse).
func columnDefault(c *decoder.Column, s *schema, expr string) any {
	if expr == "" {
		return nil
	}
	switch c.TypeOID {
	case oidBool, oidInt2, oidInt4, oidInt8, oidUUID, oidTimestamp, oidTimestamptz:
		expr = strings.TrimFunc(expr, func(r rune) bool { return r <= ' ' })
		if strings.HasPrefix(expr, "NULL::") && c.TypeOID != oidUUID && c.TypeOID != oidTimestamp && c.TypeOID != oidTimestamptz {
			return nil
		}
	}
	placeholder := map[uint32]string{
		oidBool: "false", oidInt2: "0", oidInt4: "0", oidInt8: "0", oidJSON: "{}", oidJSONB: "{}",
		oidUUID: "00000000-0000-0000-0000-000000000000", oidTimestamp: "1970-01-01", oidTimestamptz: "1970-01-01",
	}[c.TypeOID]
	switch c.TypeOID {
	case oidText, oidVarchar, oidBpchar, oidJSON, oidJSONB, oidBool, oidInt2, oidInt4, oidInt8, oidUUID,
		oidTimestamp, oidTimestamptz:
	default:
		return nil // no mapper for the type (bytea, name): no default
	}
	text, ok := extractDefault(expr, placeholder)
	if !ok {
		return nil
	}
	switch c.TypeOID {
	case oidBool:
		return strings.EqualFold(text, "true")
	case oidInt2:
		n, err := strconv.ParseInt(text, 10, 16)
		if err != nil {
			return nil
		}
		return int16(n)
	case oidInt4:
		n, err := strconv.ParseInt(text, 10, 32)
		if err != nil {
			return nil
		}
		return int32(n)
	case oidInt8:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return nil
		}
		return n
	case oidUUID:
		if !uuidText.MatchString(text) {
			return nil
		}
		return strings.ToLower(text)
	case oidTimestamp, oidTimestamptz:
		t, err := parseDefaultTimestamp(text)
		if err != nil {
			return nil
		}
		if c.TypeOID == oidTimestamptz {
			return zonedTimestamp(t, c.TypeModifier)
		}
		if s.name == nameTimestamp {
			return t.UnixMilli()
		}
		return t.UnixMicro()
	}
	return text
}

var uuidText = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

// parseDefaultTimestamp reads a timestamp default literal ("1970-01-01",
// "2020-01-02 03:04:05.6", with or without an offset) as UTC unless it
// carries an offset.
func parseDefaultTimestamp(text string) (time.Time, error) {
	for _, layout := range []string{"2006-01-02", "2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999-07",
		"2006-01-02 15:04:05.999999999-07:00", "2006-01-02T15:04:05.999999999Z07:00"} {
		if t, err := time.Parse(layout, text); err == nil {
			return t.UTC(), nil
		}
	}
	return time.Time{}, fmt.Errorf("timestamp default %q not understood", text)
}

// CatalogLoader reads column facts on a connection of its own, opened on
// first use and again after a failure, for Config.ReloadColumns. Safe for
// concurrent use; Close it when the Router is done.
type CatalogLoader struct {
	cc      *pgx.ConnConfig
	timeout time.Duration

	mu   sync.Mutex
	conn *pgx.Conn
}

// NewCatalogLoader returns a loader connecting with cc (an ordinary, not a
// replication, connection); each Load is bounded by timeout.
func NewCatalogLoader(cc *pgx.ConnConfig, timeout time.Duration) *CatalogLoader {
	return &CatalogLoader{cc: cc, timeout: timeout}
}

// Load reads the column facts of table ("schema.table"), as LoadColumns.
// On a connection failure it drops the connection, so the next Load opens
// a new one, and returns the error (wrapping pgconn's, so the relay can
// tell Postgres being unreachable).
func (l *CatalogLoader) Load(table string) ([]ColumnInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), l.timeout)
	defer cancel()
	if l.conn == nil {
		c, err := pgx.ConnectConfig(ctx, l.cc)
		if err != nil {
			return nil, fmt.Errorf("eventrouter: connect to postgres to read the column facts of %s: %w", table, err)
		}
		l.conn = c
	}
	cols, err := LoadColumns(ctx, l.conn, []string{table})
	if err != nil {
		if l.conn.IsClosed() || ctx.Err() != nil {
			_ = l.conn.Close(context.Background())
			l.conn = nil
		}
		return nil, err
	}
	return cols[table], nil
}

// Close closes the loader's connection, if open.
func (l *CatalogLoader) Close() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.conn.Close(ctx)
		l.conn = nil
	}
}
