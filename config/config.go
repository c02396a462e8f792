package config

import (
	"errors"
	"slices"
	"strings"
	"time"
)

// Columns names the outbox table's columns that walbox reads. Names are
// matched exactly (case-sensitively) against the column names pgoutput sends.
type Columns struct {
	ID            string // event id, used for deduplication; default "id"
	AggregateType string // default "aggregate_type"
	AggregateID   string // record key, so one aggregate's events stay ordered; default "aggregate_id"
	EventType     string // default "event_type"
	Payload       string // record value; default "payload"
	Headers       string // JSON object copied into record headers; default "headers"
	// Topic, when set, names a column holding each row's destination topic,
	// used instead of Config.Topic. Default "" (unset: the template is used).
	Topic string
}

// Accepted values of Config.InvalidRows.
const (
	InvalidRowsFail       = "fail"
	InvalidRowsDeadLetter = "dead-letter"
)

// Config holds the settings of `walbox run`. Build one with Defaults (or
// Load) and check it with Validate; the zero value is not valid. A Config is
// a plain value: copy it freely, it is safe for concurrent reads.
//
// The flag, environment variable, YAML key and default of each field are
// listed by Usage (and declared once, in options.go).
type Config struct {
	// PGDSN is the Postgres connection string, a libpq URL
	// (postgres://user:pass@host:5432/db) or key=value DSN. Required. It
	// holds a password: log Redacted(), never the Config itself.
	PGDSN string
	// KafkaBrokers are the seed brokers, each host:port. Required.
	KafkaBrokers []string
	// Table is the outbox table as schema.table (or table, meaning
	// public.table), written as stored in the catalog: unquoted and
	// case-sensitive. Default "public.outbox". See TableName.
	Table string
	// Slot is the logical replication slot; ^[a-z0-9_]{1,63}$. Default "walbox".
	Slot string
	// Publication is the publication pgoutput streams. Default "walbox".
	Publication string
	// Topic is the destination topic template; {column} placeholders are
	// replaced by the row's values. Default "outbox.event.{aggregate_type}".
	Topic string
	// Columns maps the outbox roles to column names.
	Columns Columns
	// InvalidRows is what to do with a row that cannot be turned into a
	// record: "fail" (default: stop without confirming its LSN) or
	// "dead-letter" (produce it to DeadLetterTopic and go on).
	InvalidRows string
	// DeadLetterTopic receives invalid rows; required when InvalidRows is
	// "dead-letter", ignored otherwise. Default "".
	DeadLetterTopic string
	// MessagePrefix, when set, routes transactional logical decoding
	// messages with this prefix as outbox events.
	MessagePrefix string
	// MessagePrefixAllowPublic acknowledges that PUBLIC may execute
	// pg_logical_emit_message, so any role can emit outbox messages; without
	// it walbox refuses to start with MessagePrefix set on such a server.
	MessagePrefixAllowPublic bool
	// MetricsAddr is the host:port the Prometheus endpoint listens on;
	// "" disables it. Default "127.0.0.1:9187".
	MetricsAddr string
	// StatusInterval is how often the confirmed position is reported to
	// Postgres; > 0. Default 1s.
	StatusInterval time.Duration
	// PGReceiveTimeout is how long the replication connection may stay
	// silent before walbox asks the server for a reply (at half of it) and
	// then gives the connection up as dead and reconnects.
	PGReceiveTimeout time.Duration
	// SlotBusyTimeout is how long walbox waits for a slot another process
	// holds (a killed predecessor's walsender lingers until it notices)
	// before it stops with an error.
	SlotBusyTimeout time.Duration
	// FailoverSlot creates the slot with failover enabled (PostgreSQL 17+).
	FailoverSlot bool
	// CreateSlot lets walbox create a missing slot even though the
	// publication exists. Without it a missing slot is created only on a
	// clear first start (the publication did not exist either); otherwise
	// it is reported, because a new slot starts at "now" and would skip
	// every event committed since the old slot's position.
	CreateSlot bool
	// ShutdownTimeout bounds the flush of in-flight records on shutdown; > 0.
	// Default 30s.
	ShutdownTimeout time.Duration
	// DedupWindow is how many recent event ids are remembered to drop
	// duplicates after a reconnect; 0 disables. Default 100000.
	DedupWindow int
	// MaxInflightRecords bounds records produced but not yet acknowledged;
	// > 0. Default 5000.
	MaxInflightRecords int
	// MaxInflightBytes bounds the bytes of those records; at least
	// ProducerBatchMaxBytes. Default 8 MiB.
	MaxInflightBytes int64
	// ProducerLinger is passed to kgo.ProducerLinger: how long a partition's
	// batch waits for more records. Default 5ms: fuller batches kept the
	// benchmark's p99 low on a CPU-starved machine for a few ms of median
	// latency. 0 means no lingering; franz-go still batches records that
	// arrive while a request is in flight.
	// At most 1m (franz-go's limit).
	ProducerLinger time.Duration
	// ProducerBatchMaxBytes is passed to kgo.ProducerBatchMaxBytes; between
	// 512 and 1 GiB (franz-go's limits). Default 1000012, franz-go's default,
	// which matches Kafka's max.message.bytes default.
	ProducerBatchMaxBytes int
	// ReconnectBackoffMin and ReconnectBackoffMax bound the exponential
	// backoff between reconnection attempts; 0 < min <= max.
	// Defaults 500ms and 30s.
	ReconnectBackoffMin time.Duration
	ReconnectBackoffMax time.Duration
	// ClientID is the Kafka client id; 1 to 256 bytes. Default "walbox".
	ClientID string
	// LogLevel is debug, info (default), warn or error.
	LogLevel string
	// LogFormat is json (default) or text.
	LogFormat string
}

// Defaults returns the default settings. PGDSN and KafkaBrokers are empty:
// they have no sensible default and Validate reports them missing.
func Defaults() Config {
	return Config{
		Table:       "public.outbox",
		Slot:        "walbox",
		Publication: "walbox",
		Topic:       "outbox.event.{aggregate_type}",
		Columns: Columns{
			ID:            "id",
			AggregateType: "aggregate_type",
			AggregateID:   "aggregate_id",
			EventType:     "event_type",
			Payload:       "payload",
			Headers:       "headers",
		},
		InvalidRows:           InvalidRowsFail,
		MetricsAddr:           "127.0.0.1:9187",
		StatusInterval:        time.Second,
		PGReceiveTimeout:      30 * time.Second,
		SlotBusyTimeout:       2 * time.Minute,
		ShutdownTimeout:       30 * time.Second,
		DedupWindow:           100_000,
		MaxInflightRecords:    5_000,
		MaxInflightBytes:      8 << 20,
		ProducerLinger:        5 * time.Millisecond,
		ProducerBatchMaxBytes: 1_000_012,
		ReconnectBackoffMin:   500 * time.Millisecond,
		ReconnectBackoffMax:   30 * time.Second,
		ClientID:              "walbox",
		LogLevel:              "info",
		LogFormat:             "json",
	}
}

// Validate checks every field and returns all problems at once, joined with
// errors.Join, so that a user can fix them in one go; nil if c is usable.
// Each problem is an *OptionError naming the flag and environment variable,
// the bad value and what is accepted, and wraps ErrInvalid.
//
// Validating PGDSN parses it with pgconn.ParseConfig, which also reads the
// PG* environment variables and the files the DSN names (service file,
// TLS certificates), so a DSN that cannot be used is reported here.
func (c Config) Validate() error {
	return errors.Join(c.problems(nil)...)
}

// problems runs every option's check. Options in skip are not checked: Load
// passes those whose value failed to parse, so that the user does not get a
// second, confusing message about the value that was kept instead.
func (c Config) problems(skip map[*option]bool) []error {
	var errs []error
	for _, o := range options {
		if o.check == nil || skip[o] {
			continue
		}
		for _, e := range splitJoined(o.check(&c)) {
			errs = append(errs, o.errorFor(o.value.get(&c), e, ""))
		}
	}
	return errs
}

// Redacted returns a copy of c that is safe to log: the password in PGDSN
// (userinfo, password= or sslpassword=) is replaced by "xxxxx".
func (c Config) Redacted() Config {
	c.PGDSN, _ = redactDSN(c.PGDSN)
	c.KafkaBrokers = slices.Clone(c.KafkaBrokers)
	return c
}

// TableName splits Table into schema and table name; the schema is
// "public" when Table has none. Call it on a validated Config.
func (c Config) TableName() (schema, table string) {
	if s, t, ok := strings.Cut(c.Table, "."); ok {
		return s, t
	}
	return "public", c.Table
}
