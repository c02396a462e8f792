package inbox

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Defaults of Config.
const (
	// DefaultTable is the inbox table migrations/001_inbox.sql creates.
	DefaultTable = "public.walbox_inbox"
	// DefaultHeader is the record header walbox puts the outbox row's id in.
	DefaultHeader = "event_id"
)

// indexSuffix names the cleanup index after the table: <table>_received_at_idx.
const indexSuffix = "_received_at_idx"

// maxIdentLen is NAMEDATALEN-1: PostgreSQL silently truncates longer names,
// which would make the inbox use another table than the one created.
const maxIdentLen = 63

// Config configures an Inbox. The zero value of each optional field means
// its default.
type Config struct {
	// Table is the inbox table, "schema.table" or "table" (schema public),
	// unquoted and case-sensitive, as stored in the catalog. Default
	// public.walbox_inbox. At most 47 bytes so that the index named after it
	// (<table>_received_at_idx) fits PostgreSQL's 63.
	Table string

	// Consumer names the reader the rows belong to: every event is applied
	// once per consumer. Required. Use the consumer group's name, the same
	// for every instance of the group.
	Consumer string

	// Header is the record header holding the event id. Default event_id
	// (walbox's header); `id` for walbox's Debezium-compatible records.
	Header string

	// Source names where a record's event id is unique, for a consumer that
	// reads events of several origins whose ids may coincide (two outbox
	// tables with BIGSERIAL ids both have an event 1). Rows are keyed by
	// (consumer, source, event id): an event is skipped only when one with
	// the same id from the same source was applied. nil (the default) puts
	// every record in the source "", so ids must be unique across
	// everything the consumer reads. An error, or a name that is not text
	// PostgreSQL can store (a NUL byte, invalid UTF-8), refuses the record
	// before anything is written. SourceTopic keys by the record's topic. The
	// function must be deterministic: a copy of an event that maps to
	// another source than the first is applied again.
	Source func(rec *kgo.Record) (string, error)
}

// SourceTopic is a Config.Source that keys event ids by the record's topic:
// right when each topic carries the events of one origin (one outbox
// table), wrong when copies of one event can arrive on two topics (a
// re-publish or a replay to another topic is then applied again).
func SourceTopic(rec *kgo.Record) (string, error) { return rec.Topic, nil }

// tableName is a validated schema-qualified table name.
type tableName struct{ schema, name string }

func (t tableName) String() string   { return t.schema + "." + t.name }
func (t tableName) sanitize() string { return pgx.Identifier{t.schema, t.name}.Sanitize() }
func (t tableName) index() string    { return pgx.Identifier{t.name + indexSuffix}.Sanitize() }

// withDefaults fills the empty optional fields.
func (c Config) withDefaults() Config {
	if c.Table == "" {
		c.Table = DefaultTable
	}
	if c.Header == "" {
		c.Header = DefaultHeader
	}
	return c
}

// Validate checks the configuration after defaults are applied. Errors wrap
// ErrInvalidConfig and name the field.
func (c Config) Validate() error {
	c = c.withDefaults()
	if _, err := parseTable(c.Table); err != nil {
		return err
	}
	if strings.TrimSpace(c.Consumer) == "" {
		return fmt.Errorf("%w: Consumer is empty; name the reader the rows belong to, e.g. the consumer group's name", ErrInvalidConfig)
	}
	if strings.ContainsFunc(c.Consumer, unicode.IsControl) {
		return fmt.Errorf("%w: Consumer %q contains a control character", ErrInvalidConfig, c.Consumer)
	}
	if !utf8.ValidString(c.Consumer) {
		return fmt.Errorf("%w: Consumer %q is not valid UTF-8, which PostgreSQL's text refuses", ErrInvalidConfig, c.Consumer)
	}
	return nil
}

// parseTable parses "schema.table" or "table".
func parseTable(s string) (tableName, error) {
	parts := strings.Split(s, ".")
	if len(parts) == 1 {
		parts = []string{"public", parts[0]}
	}
	if len(parts) != 2 {
		return tableName{}, fmt.Errorf("%w: Table %q: expected schema.table such as %s (names containing a dot are not supported)", ErrInvalidConfig, s, DefaultTable)
	}
	for i, p := range parts {
		limit := maxIdentLen
		if i == 1 {
			limit -= len(indexSuffix)
		}
		if why := identProblem(p, limit); why != "" {
			return tableName{}, fmt.Errorf("%w: Table %q: %q: %s", ErrInvalidConfig, s, p, why)
		}
	}
	return tableName{schema: parts[0], name: parts[1]}, nil
}

func identProblem(s string, limit int) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > limit:
		return fmt.Sprintf("it is %d bytes long, at most %d fit", len(s), limit)
	case strings.ContainsRune(s, '"'):
		return "write it without quotes, exactly as stored; names are case-sensitive here"
	case strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) || r == unicode.ReplacementChar }):
		return "it contains a control or invalid character"
	}
	return ""
}
