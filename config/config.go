package config

import (
	"cmp"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/walbox/walbox/kafkasec"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/schemareg"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
	"github.com/walbox/walbox/tracing"
)

// Columns names the outbox table's columns that walbox reads; it is the
// router's type, whose documentation states the defaults and what each
// column is for. Names are matched exactly (case-sensitively) against the
// column names pgoutput sends.
type Columns = router.Columns

// Accepted values of Config.InvalidRows: the router's policies.
const (
	InvalidRowsFail       = string(router.PolicyFail)
	InvalidRowsDeadLetter = string(router.PolicyDeadLetter)
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
	// holds a password: log Redacted(), never the Config itself. Load drops
	// a replication parameter from it (walbox and slotctl open ordinary
	// sessions with it; the pipeline adds replication=database itself).
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
	// Topic is the destination topic template (router.Config.TopicTemplate):
	// a placeholder names a logical field (id, aggregate_type, aggregate_id,
	// event_type, payload, headers, topic), read from the column Columns
	// maps it to, or else a column or column->>key. Default
	// router.DefaultTopicTemplate, "outbox.event.{aggregate_type}".
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
	// CloudEvents is "none" (default), "binary" or "structured": the
	// CloudEvents Kafka protocol binding's mode (router.CloudEvents).
	CloudEvents string
	// CloudEventsSource is the ce_source attribute; "" is
	// "/walbox/<schema>.<table>".
	CloudEventsSource string
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
	// PGOrigin is pgoutput's origin parameter: "any" (default) or "none"
	// (PostgreSQL 16+), which leaves out changes replicated from another
	// server.
	PGOrigin string
	// StatusInterval is how often the confirmed position is reported to
	// Postgres; > 0. Default 1s.
	StatusInterval time.Duration
	// PGReceiveTimeout is how long the replication connection may stay
	// silent before walbox asks the server for a reply (at a quarter of it) and
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
	// Streaming has the server stream large in-progress transactions
	// (pgoutput protocol version 2+) instead of spilling them to its disk.
	// Default true.
	Streaming bool
	// SpoolDir is where streamed transactions wait for their commit.
	// Default empty: walbox-spool-<uid> in the temporary directory.
	SpoolDir string
	// SpoolMaxBytes bounds SpoolDir's streamed transactions; > 0. Default 1 GiB.
	SpoolMaxBytes int64
	// ShutdownTimeout bounds the flush of in-flight records on shutdown; > 0.
	// Default 30s.
	ShutdownTimeout time.Duration
	// LostSessionFlushTimeout bounds how long records of a lost
	// replication session may still be delivered before they are purged
	// (the slot's next holder sends them again); > 0. Default 10s.
	LostSessionFlushTimeout time.Duration
	// DedupWindow is how many recently acknowledged events are remembered
	// (by WAL position: commit LSN and position in the transaction) to skip
	// what Postgres re-sends after a reconnect; 0 disables. Default 100000.
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
	// KafkaSecurity holds Kafka TLS and SASL; the zero value (default) is
	// plaintext without authentication. Redacted masks its password.
	KafkaSecurity kafkasec.Config
	// LogLevel is debug, info (default), warn or error.
	LogLevel string
	// LogFormat is json (default) or text.
	LogFormat string

	// Tracing (package tracing): on when an OTEL_EXPORTER_OTLP_ENDPOINT is
	// set; these are what no OpenTelemetry variable covers. TracingParent
	// is child (default) or link, TracingTraceparent producer (default) or
	// row, TracingContextHeader the header carrying the row's trace
	// context (traceparent), TracingSpanName the span's name ("": send
	// <topic>).
	TracingParent        string
	TracingTraceparent   string
	TracingContextHeader string
	TracingSpanName      string

	// Snapshot is the takeover mode (package snapshot): "none" (default),
	// "pending" or "all". It applies only on the start that creates the slot.
	Snapshot string
	// SnapshotWhere selects the pending rows; required with "pending",
	// refused otherwise. Default "".
	SnapshotWhere string
	// SnapshotOrder lists the columns the snapshot is read in, comma-separated;
	// "" (default) means Columns.ID.
	SnapshotOrder string
	// ReplayWindow, when > 0, makes walbox run keep a trailing slot
	// (ReplaySlot) about this far behind the live slot, for walbox replay.
	// Default 0: off.
	ReplayWindow time.Duration
	// ReplaySlot is the trailing slot's name; "" means "<slot>_replay"
	// (see ReplaySlotName).
	ReplaySlot string

	// Standby waits without a time limit for a slot another instance holds
	// and takes over when it frees (pipeline.Config.Standby). Default false.
	Standby bool
	// HeartbeatInterval is how often a heartbeat message is emitted and the
	// slot's lag read; 0 disables. Default 10s.
	HeartbeatInterval time.Duration

	// DebeziumConfig is a Kafka Connect configuration (.properties or
	// REST JSON) of Debezium's Postgres connector with the outbox
	// EventRouter; when set, walbox runs in Debezium mode: its records are
	// Debezium's, and the file gives the options it maps (see
	// debezium.Translate) unless a flag, environment variable or the YAML
	// file sets them explicitly. Default "".
	DebeziumConfig string
	// DebeziumWorkerConfig is the Connect worker's .properties
	// (bootstrap.servers, converters, producer.*); only with
	// DebeziumConfig. Default "".
	DebeziumWorkerConfig string

	// ValueFormat is the record value's format: "json" (default: the
	// payload as it is) or a schema registry format, "avro", "protobuf" or
	// "json-schema" (package schemareg), which needs SchemaRegistry.URLs.
	ValueFormat string
	// KeyFormat is the record key's format: "text" (default: the
	// aggregate id as it is) or "avro" or "json-schema", which encode the
	// text as a string under the subject "<topic>-key".
	KeyFormat string
	// SchemaRegistry says how to reach the schema registry; Redacted masks
	// its password and bearer token.
	SchemaRegistry schemareg.ClientConfig
	// ValueSchema says which registered schema encodes the values
	// (schemareg.Config, see ValueEncoderConfig).
	ValueSchema ValueSchema
	// Delivery is "at-least-once" (default) or "exactly-once"
	// (pipeline.Config.Delivery).
	Delivery string
	// TransactionalID is the Kafka transactional id in exactly-once mode;
	// "" (default) means "walbox-<slot>".
	TransactionalID string
	// TransactionMaxRecords and TransactionMaxInterval bound one Kafka
	// transaction in exactly-once mode; > 0. Defaults 10000 and 100ms.
	TransactionMaxRecords  int
	TransactionMaxInterval time.Duration
	// TransactionSplitRecords commits a Kafka transaction inside a
	// Postgres transaction once it holds this many records; > 0. Default
	// 1000000.
	TransactionSplitRecords int
	// TransactionTimeout is the Kafka transaction timeout in exactly-once
	// mode, at most the brokers' transaction.max.timeout.ms; > 0.
	// Default 1m.
	TransactionTimeout time.Duration
	// StateTopic is the compacted topic of committed positions in
	// exactly-once mode. Default "walbox.state".
	StateTopic string
}

// ReplaySlotName returns the trailing slot's name: ReplaySlot, or
// "<slot>_replay".
func (c Config) ReplaySlotName() string { return retention.SlotName(c.Slot, c.ReplaySlot) }

// defaultDedupWindow is walbox's dedup window while pipeline.DefaultConfig
// states none (0 there means disabled, so it cannot be a default).
const defaultDedupWindow = 100_000

// Defaults returns the default settings. They come from the packages that
// own the settings (router, slotctl, pipeline), so they are stated once;
// only the settings of walbox's own process (metrics address, logging,
// Kafka client id and linger) are decided here. PGDSN and KafkaBrokers are
// empty: they have no sensible default and Validate reports them missing.
func Defaults() Config {
	p := pipeline.DefaultConfig()
	return Config{
		Table:       slotctl.DefaultTable,
		Slot:        slotctl.DefaultSlot,
		Publication: slotctl.DefaultPublication,
		Topic:       router.DefaultTopicTemplate,
		Columns:     router.DefaultColumns(),
		InvalidRows: InvalidRowsFail,
		ValueFormat: ValueFormatJSON,
		CloudEvents: "none",
		KeyFormat:   KeyFormatText,
		ValueSchema: ValueSchema{Strategy: string(schemareg.TopicName), CacheSize: schemareg.DefaultCacheSize, Source: string(schemareg.Registered)},
		SchemaRegistry: schemareg.ClientConfig{
			RequestTimeout: schemareg.DefaultRequestTimeout,
			RetryBudget:    schemareg.DefaultRetryBudget,
		},
		MetricsAddr:           "127.0.0.1:9187",
		PGOrigin:              pipeline.OriginAny,
		StatusInterval:        p.StatusInterval,
		PGReceiveTimeout:      p.ReceiveTimeout,
		SlotBusyTimeout:       p.SlotBusyTimeout,
		ShutdownTimeout:       p.ShutdownTimeout,
		DedupWindow:           cmp.Or(p.DedupWindow, defaultDedupWindow),
		MaxInflightRecords:    p.MaxInflightRecords,
		MaxInflightBytes:      p.MaxInflightBytes,
		ProducerLinger:        5 * time.Millisecond,
		ProducerBatchMaxBytes: p.MaxBatchBytes,
		ReconnectBackoffMin:   p.BackoffMin,
		ReconnectBackoffMax:   p.BackoffMax,
		ClientID:              "walbox",
		LogLevel:              "info",
		LogFormat:             "json",
		TracingParent:         string(tracing.ParentChild),
		TracingTraceparent:    string(tracing.OutgoingProducer),
		TracingContextHeader:  tracing.DefaultContextHeader,
		Snapshot:              string(snapshot.ModeNone),
		HeartbeatInterval:     10 * time.Second,
		Streaming:             !p.DisableStreaming,
		SpoolDir:              p.SpoolDir,
		SpoolMaxBytes:         p.SpoolMaxBytes,

		Delivery:                p.Delivery,
		TransactionMaxRecords:   p.TransactionMaxRecords,
		TransactionMaxInterval:  p.TransactionMaxInterval,
		TransactionSplitRecords: p.TransactionSplitRecords,
		TransactionTimeout:      p.TransactionTimeout,
		StateTopic:              p.StateTopic,

		LostSessionFlushTimeout: p.LostSessionFlushTimeout,
	}
}

// RouterConfig returns the router's settings.
func (c Config) RouterConfig() router.Config {
	return router.Config{
		Columns:         c.Columns,
		TopicTemplate:   c.Topic,
		InvalidRows:     router.Policy(c.InvalidRows),
		DeadLetterTopic: c.DeadLetterTopic,
		CloudEvents:     c.cloudEvents(),
	}
}

// cloudEvents is the router's CloudEvents settings; the data's content
// type follows --value-format.
func (c Config) cloudEvents() router.CloudEvents {
	if c.CloudEvents == "" || c.CloudEvents == "none" {
		return router.CloudEvents{}
	}
	ct := map[string]string{
		"avro": "application/avro", "protobuf": "application/x-protobuf", "json-schema": "application/json",
		"pre-encoded": "application/octet-stream",
	}[c.ValueFormat]
	return router.CloudEvents{Mode: router.CloudEventsMode(c.CloudEvents), Source: c.CloudEventsSource, DataContentType: ct}
}

// SlotctlConfig returns the names slotctl checks and manages, with
// CreateMissing off and Failover from FailoverSlot.
func (c Config) SlotctlConfig() slotctl.Config {
	var s slotctl.Config
	for _, o := range options {
		if o.slotctl != nil {
			o.slotctl(&c, &s)
		}
	}
	return s
}

// PipelineConfig returns the relay's settings. MaxBatchBytes is
// ProducerBatchMaxBytes; walbox run lowers it to the brokers' limit.
// DeadLetterTopic is set only under the dead-letter policy: under fail, a
// record Kafka refuses stops walbox.
func (c Config) PipelineConfig() pipeline.Config {
	var p pipeline.Config
	for _, o := range options {
		if o.pipeline != nil {
			o.pipeline(&c, &p)
		}
	}
	return p
}

// TracingConfig returns the tracing settings walbox's flags hold; the
// OTEL_* variables say the rest (tracing.New).
func (c Config) TracingConfig() tracing.Config {
	return tracing.Config{
		Parent:        tracing.ParentMode(c.TracingParent),
		Outgoing:      tracing.OutgoingMode(c.TracingTraceparent),
		ContextHeader: c.TracingContextHeader,
		SpanName:      c.TracingSpanName,
	}
}

// Validate checks every field and returns all problems at once, joined with
// errors.Join, so that a user can fix them in one go; nil if c is usable.
// Each problem is an *OptionError naming the flag and environment variable,
// the bad value and what is accepted, and wraps ErrInvalid.
//
// The packages that use the settings decide what is valid: Validate calls
// router.Config.Validate, slotctl.Config.Validate and
// pipeline.Config.Validate and reports each of their problems under the
// option it belongs to (see problems.go). It checks itself only what no
// package owns: the DSN's syntax, brokers, the metrics address, durations
// and sizes the pipeline would silently replace by defaults, logging.
//
// Validating PGDSN parses it with pgconn.ParseConfig, which also reads the
// PG* environment variables and the files the DSN names (service file,
// TLS certificates), so a DSN that cannot be used is reported here.
func (c Config) Validate() error {
	return errors.Join(c.problems(nil, nil, nil)...)
}

// Redacted returns a copy of c that is safe to log: the password in PGDSN
// (userinfo, password= or sslpassword=), the Kafka SASL password and the
// schema registry's password and bearer token are replaced by "xxxxx". (The other secrets are held in files, by path.)
func (c Config) Redacted() Config {
	c.PGDSN, _ = redactDSN(c.PGDSN)
	c.KafkaBrokers = slices.Clone(c.KafkaBrokers)
	c.KafkaSecurity.SASLPassword = redactSecret(c.KafkaSecurity.SASLPassword)
	c.SchemaRegistry.URLs = slices.Clone(c.SchemaRegistry.URLs)
	c.SchemaRegistry.BasicAuthPassword = redactSecret(c.SchemaRegistry.BasicAuthPassword)
	c.SchemaRegistry.BearerToken = redactSecret(c.SchemaRegistry.BearerToken)
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

// SnapshotConfig returns the takeover settings, parsed; call it on a
// validated Config.
func (c Config) SnapshotConfig() snapshot.Config {
	mode, _ := snapshot.ParseMode(c.Snapshot)
	order, _ := snapshot.ParseOrder(c.SnapshotOrder, c.Columns.ID)
	return snapshot.Config{Mode: mode, Where: strings.TrimSpace(c.SnapshotWhere), Order: order}
}
