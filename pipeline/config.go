package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/tracing"
)

// Config holds the relay's settings. Zero durations and sizes take the
// defaults noted on each field.
type Config struct {
	// ConnString is a libpq URL or key=value DSN; the relay adds
	// replication=database itself.
	ConnString  string
	Slot        string
	Publication string
	// StatusInterval is how often a standby status update is sent (1s).
	StatusInterval time.Duration
	// ReceiveTimeout is how long the replication connection may stay
	// silent (30s). It is raised to the server's wal_sender_timeout when
	// that is longer: while the server decodes a large transaction it
	// sends nothing but keepalives, at best every wal_sender_timeout/2, so
	// a shorter timeout would give up live connections and make the
	// server decode the same transaction again, forever. At a quarter of
	// it the status update asks the server for a reply; past it the
	// connection is given up as dead, which is how a connection stalled
	// without being closed (a partition, a hung proxy) is noticed: the
	// server only pings a client that stops replying, and writes into a
	// dead socket succeed for a long time.
	ReceiveTimeout time.Duration
	// ShutdownTimeout bounds the wait for in-flight acks on stop (30s).
	ShutdownTimeout time.Duration
	// LostSessionFlushTimeout bounds how long records of a session that
	// ended (a lost replication connection) may still be delivered (10s).
	// Past it, what Kafka has not acknowledged is purged from the producer
	// instead of retried without limit: the slot's next holder, this
	// instance or a standby that took the slot over meanwhile, sends it
	// again from the confirmed position. Without the bound, an instance
	// cut off from Postgres and Kafka delivered its old records whenever
	// the network healed, after the new holder's newer events of the same
	// keys, and compacted topics regressed to an old state.
	LostSessionFlushTimeout time.Duration
	// DedupWindow is how many acknowledged records are remembered, by
	// commit LSN and position in their transaction (16 bytes each), to
	// skip what Postgres re-sends after a reconnect; 0 disables it.
	DedupWindow int
	// MaxInflightRecords and MaxInflightBytes bound unacknowledged records
	// (5000, 8 MiB).
	MaxInflightRecords int
	MaxInflightBytes   int64
	// BackoffMin and BackoffMax bound the reconnect delay (500ms, 30s).
	BackoffMin, BackoffMax time.Duration
	// DeadLetterTopic, when set, receives records Kafka refuses for what
	// they are (too large, invalid); empty means such a refusal stops the
	// relay. It should match the router's dead-letter policy.
	DeadLetterTopic string
	// MaxBatchBytes is the producer's batch limit (ProducerBatchMaxBytes).
	// A record refused as too large that is itself near this size is the
	// culprit and may be dead-lettered; a smaller one was refused with its
	// batch, because a topic's max.message.bytes is below the limit, and
	// that stops the relay with advice instead. 0 means franz-go's default.
	MaxBatchBytes int
	// MessagePrefix, when set, makes walbox also route transactional
	// logical decoding messages with this prefix (pg_logical_emit_message)
	// as outbox events; see message.go.
	MessagePrefix string
	// Tables are the outbox tables, "schema.table" (or "table", schema
	// public), as slotctl.ParseTableName reads them. Inserts into any
	// other table of the publication are not routed: they are counted
	// (walbox_foreign_changes_total) and logged once per table. Outbox
	// messages (MessagePrefix) are not tables and always route. Empty
	// routes inserts of every table the publication sends.
	Tables []string
	// TopicLimits, when set, looks up each topic's max.message.bytes the
	// first time a record goes to it, so a record Kafka would refuse as
	// too large is handled before it is produced, in order (dead-lettered
	// in place, or the relay stops before it). Nil checks records against
	// MaxBatchBytes only. Use a KafkaTopicLimits, given to NewKafkaClient
	// too.
	TopicLimits TopicLimits
	// SlotBusyTimeout is how long a slot held by another process (SQLSTATE
	// 55006) is waited for before giving up (2m): long enough for a killed
	// predecessor's walsender to notice (wal_sender_timeout, 60s by
	// default), short enough to report a second walbox on the same slot.
	SlotBusyTimeout time.Duration
	// Standby makes a slot held by another process (SQLSTATE 55006) a
	// normal state instead of an error: the relay waits for it without a
	// time limit, retrying every StandbyRetry, reports itself as standby
	// (Standby(), walbox_standby) and takes over when the slot frees.
	// SlotBusyTimeout does not apply. The slot is the only lock.
	Standby bool
	// StandbyRetry is the fixed interval between a standby's attempts to
	// start replication on the busy slot (1s).
	StandbyRetry time.Duration
	// Heartbeats asks the server for logical decoding messages even without
	// MessagePrefix, so heartbeats (HeartbeatPrefix) come back through the
	// slot; they are observed (HeartbeatSeen) and never routed.
	Heartbeats bool
	// DecodeFromStandby lets a session stream from a server in recovery
	// (logical decoding on a standby, PostgreSQL 16+). Otherwise a session
	// whose connection reached a standby ends before it starts replication,
	// takes nothing from the standby's WAL for a failover or a restore, and
	// is retried until the connection reaches the primary. walbox run sets
	// it with --heartbeat-interval=0 (no heartbeat can be written on a
	// standby).
	DecodeFromStandby bool
	// OnHeartbeat, when set, receives the content of every message with
	// heartbeat.Prefix (a heartbeat.Monitor's Seen). Such messages are
	// never routed, whatever this is.
	OnHeartbeat func(content []byte)
	// Origin is pgoutput's origin parameter: OriginAny ("" too, the
	// default) or OriginNone, which has the server filter out changes
	// applied by logical replication from another server (PostgreSQL 16+;
	// an older server is refused when replication starts).
	Origin string

	// Tracer, when set, traces each event whose row carries a trace
	// context (package tracing); nil traces nothing.
	Tracer *tracing.Tracer

	// Delivery is DeliveryAtLeastOnce (default) or DeliveryExactlyOnce.
	// Exactly-once needs a TxnProducer (a client made by NewKafkaClient
	// with KafkaConfig.TransactionalID set to TransactionalIDFor's value)
	// and State; see eos_txn.go.
	Delivery string
	// TransactionalID is the Kafka transactional id in exactly-once mode;
	// empty means TransactionalIDFor(Slot), "walbox-<slot>".
	TransactionalID string
	// TransactionMaxRecords and TransactionMaxInterval bound a Kafka
	// transaction (10000 records, 100ms): it is committed at the first
	// Postgres transaction boundary after either is reached; an interval
	// above half of TransactionTimeout counts as half of it, so that the
	// broker never aborts a transaction for its age. A larger Postgres
	// transaction is a Kafka transaction of its own, unless
	// TransactionSplitRecords or the transaction timeout split it.
	TransactionMaxRecords  int
	TransactionMaxInterval time.Duration
	// TransactionSplitRecords (1,000,000) commits a Kafka transaction
	// inside a Postgres transaction once it holds this many records; one
	// open for half of TransactionTimeout is committed there too, so that
	// the broker never aborts it for its age. Each such commit records the
	// position inside the Postgres transaction (eos_split.go): a restart
	// produces only the rest of it. read_committed consumers then see the
	// Postgres transaction as several Kafka transactions.
	TransactionSplitRecords int
	// TransactionTimeout is the Kafka transaction timeout (1m): the broker
	// aborts a transaction open longer. It must be the transactional
	// client's (KafkaConfig.TransactionTimeout) and at most the brokers'
	// transaction.max.timeout.ms (CheckTransactionTimeout). A transaction
	// the broker aborted for its age makes the relay restart the session
	// from the committed position, not stop as fenced. A Postgres
	// transaction that takes longer than half of it to produce is split
	// (TransactionSplitRecords), so that no Kafka transaction reaches it.
	TransactionTimeout time.Duration
	// StateTopic is the compacted topic the committed positions go to
	// ("walbox.state"); State reads it (a KafkaState on this topic).
	StateTopic string
	State      StateStore
	// NewTxnProducer, when set, builds a new transactional client (with
	// the same transactional id) for every exactly-once session after the
	// first: franz-go loads a client's producer id once, and a session that
	// regains the slot from a peer must load it again, which fences the
	// peer and aborts the transaction it left open. The relay closes the
	// client it replaces (a Close method), the producer given to New
	// included; the caller closes the last one. Nil keeps New's producer
	// for every session, whose cached epoch fails "fenced" once a peer
	// took the transactional id over.
	NewTxnProducer func() (TxnProducer, error)
	// OutboxUpdates is what an UPDATE of an outbox table does: "" (walbox's
	// own mode) ignores it, as walbox routes inserts only; "warn" and
	// "error" skip it with a log line at that level, and "fatal" stops the
	// relay before anything after it is confirmed. It is Debezium's
	// table.op.invalid.behavior; every update of an outbox table is
	// counted in walbox_outbox_updates_total whatever the policy.
	OutboxUpdates string
	// DisableStreaming keeps pgoutput protocol version 1, where the server
	// holds a transaction until its commit and spills what exceeds
	// logical_decoding_work_mem to its own disk. By default walbox streams
	// in-progress transactions (protocol version 2 to 4, streaming 'on')
	// and keeps their changes in the spool until they commit (stream.go).
	DisableStreaming bool
	// SpoolDir is where streamed transactions wait for their commit, in a
	// subdirectory per process; empty means DefaultSpoolDir(),
	// "walbox-spool-<uid>" in os.TempDir() ($TMPDIR, else /tmp), decided
	// when the relay is built.
	// It is disposable: a restart sends uncommitted transactions again.
	SpoolDir string
	// SpoolMaxBytes bounds the spool (1 GiB). A streamed transaction that
	// does not fit ends the session (ErrSpoolFull), as does a spool that
	// fails (ErrSpoolUnwritable); the next one speaks protocol version 1
	// until that transaction ended (stream.go's unstreamable).
	SpoolMaxBytes int64
	// TxnPhase, when set, is called by the loop at each phase of a Kafka
	// transaction: PhaseProduced, PhaseCommitted, PhaseConfirmed. It is a
	// test hook for crash tests; it must not block.
	TxnPhase func(phase string)
}

// transactionalID returns the transactional id in use.
func (c Config) transactionalID() string {
	if c.TransactionalID != "" {
		return c.TransactionalID
	}
	return TransactionalIDFor(c.Slot)
}

// TransactionalIDOrDefault returns TransactionalID, or the slot's default.
func (c Config) TransactionalIDOrDefault() string { return c.transactionalID() }

// DefaultConfig returns the defaults of every defaulted field; the
// configuration package shows and applies these, so they are stated once.
func DefaultConfig() Config {
	return Config{
		StatusInterval:     time.Second,
		ReceiveTimeout:     30 * time.Second,
		ShutdownTimeout:    30 * time.Second,
		MaxInflightRecords: 5000,
		MaxInflightBytes:   8 << 20,
		MaxBatchBytes:      1000012, // franz-go's default
		SlotBusyTimeout:    2 * time.Minute,
		StandbyRetry:       time.Second,
		BackoffMin:         500 * time.Millisecond,
		BackoffMax:         30 * time.Second,

		LostSessionFlushTimeout: 10 * time.Second,

		Delivery:                DeliveryAtLeastOnce,
		TransactionMaxRecords:   10000,
		TransactionMaxInterval:  100 * time.Millisecond,
		TransactionSplitRecords: 1_000_000,
		TransactionTimeout:      DefaultTransactionTimeout,
		StateTopic:              "walbox.state",

		SpoolMaxBytes: 1 << 30,
	}
}

func (c *Config) setDefaults() {
	d := DefaultConfig()
	positiveOr(&c.StatusInterval, d.StatusInterval)
	positiveOr(&c.ReceiveTimeout, d.ReceiveTimeout)
	positiveOr(&c.ShutdownTimeout, d.ShutdownTimeout)
	positiveOr(&c.LostSessionFlushTimeout, d.LostSessionFlushTimeout)
	positiveOr(&c.MaxInflightRecords, d.MaxInflightRecords)
	positiveOr(&c.MaxInflightBytes, d.MaxInflightBytes)
	positiveOr(&c.MaxBatchBytes, d.MaxBatchBytes)
	positiveOr(&c.SlotBusyTimeout, d.SlotBusyTimeout)
	positiveOr(&c.StandbyRetry, d.StandbyRetry)
	positiveOr(&c.BackoffMin, d.BackoffMin)
	if c.Delivery == "" {
		c.Delivery = d.Delivery
	}
	positiveOr(&c.TransactionMaxRecords, d.TransactionMaxRecords)
	positiveOr(&c.TransactionMaxInterval, d.TransactionMaxInterval)
	positiveOr(&c.TransactionSplitRecords, d.TransactionSplitRecords)
	positiveOr(&c.TransactionTimeout, d.TransactionTimeout)
	if c.StateTopic == "" {
		c.StateTopic = d.StateTopic
	}
	if c.SpoolDir == "" {
		c.SpoolDir = DefaultSpoolDir()
	}
	positiveOr(&c.SpoolMaxBytes, d.SpoolMaxBytes)
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(d.BackoffMax, c.BackoffMin)
	}
}

// positiveOr replaces a zero or negative *v, which means "unset", by def.
func positiveOr[T int | int64 | time.Duration](v *T, def T) {
	if *v <= 0 {
		*v = def
	}
}

// Validate reports settings the relay cannot run with.
func (c Config) Validate() error {
	var errs []error
	if c.ConnString == "" {
		errs = append(errs, errors.New("pipeline: connection string is empty"))
	}
	if c.Slot == "" {
		errs = append(errs, errors.New("pipeline: slot name is empty"))
	}
	if c.Publication == "" {
		errs = append(errs, errors.New("pipeline: publication name is empty"))
	}
	for _, t := range c.Tables {
		if _, err := slotctl.ParseTableName(t); err != nil {
			errs = append(errs, fmt.Errorf("pipeline: outbox tables: %w", err))
		}
	}
	if c.SpoolMaxBytes < 0 {
		errs = append(errs, fmt.Errorf("pipeline: spool max bytes %d is negative", c.SpoolMaxBytes))
	}
	if c.DedupWindow < 0 {
		errs = append(errs, fmt.Errorf("pipeline: dedup window %d is negative", c.DedupWindow))
	}
	switch c.OutboxUpdates {
	case "", OutboxUpdatesWarn, OutboxUpdatesError, OutboxUpdatesFatal:
	default:
		errs = append(errs, fmt.Errorf("pipeline: outbox update policy %q is none of %s, %s, %s", c.OutboxUpdates, OutboxUpdatesWarn, OutboxUpdatesError, OutboxUpdatesFatal))
	}
	if err := validateOrigin(c.Origin); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, c.validateDelivery()...)
	return errors.Join(errs...)
}

// validateDelivery checks the delivery mode and its transaction settings.
// Zero means the default; only what a default cannot fix is reported.
func (c Config) validateDelivery() []error {
	var errs []error
	if c.Delivery != "" && c.Delivery != DeliveryAtLeastOnce && c.Delivery != DeliveryExactlyOnce {
		errs = append(errs, fmt.Errorf("pipeline: delivery %q is not one of %s, %s", c.Delivery, DeliveryAtLeastOnce, DeliveryExactlyOnce))
	}
	if c.TransactionMaxRecords < 0 {
		errs = append(errs, fmt.Errorf("pipeline: transaction max records %d is negative", c.TransactionMaxRecords))
	}
	if c.TransactionSplitRecords < 0 {
		errs = append(errs, fmt.Errorf("pipeline: transaction split records %d is negative", c.TransactionSplitRecords))
	}
	if c.TransactionMaxInterval < 0 {
		errs = append(errs, fmt.Errorf("pipeline: transaction max interval %s is negative", c.TransactionMaxInterval))
	}
	if c.TransactionTimeout < 0 {
		errs = append(errs, fmt.Errorf("pipeline: transaction timeout %s is negative", c.TransactionTimeout))
	}
	if c.TransactionalID != "" && (strings.TrimSpace(c.TransactionalID) != c.TransactionalID || len(c.TransactionalID) > 249) {
		errs = append(errs, fmt.Errorf("pipeline: transactional id %q has leading or trailing spaces or is longer than 249 bytes", c.TransactionalID))
	}
	if c.StateTopic != "" {
		if err := checkTopicName(c.StateTopic); err != nil {
			errs = append(errs, fmt.Errorf("pipeline: state topic: %w", err))
		}
	}
	return errs
}

// checkTopicName applies Kafka's rules for topic names.
func checkTopicName(t string) error {
	if t == "." || t == ".." {
		return fmt.Errorf("%q is not a valid Kafka topic name", t)
	}
	if len(t) > 249 {
		return fmt.Errorf("%q is longer than 249 characters", t)
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-') {
			return fmt.Errorf("%q contains %q; Kafka topic names use only letters, digits, '.', '_' and '-'", t, r)
		}
	}
	return nil
}

// tableSet returns Tables as a set of "schema.table", nil when empty. Call
// it on a validated Config.
func (c Config) tableSet() map[string]struct{} {
	if len(c.Tables) == 0 {
		return nil
	}
	set := make(map[string]struct{}, len(c.Tables))
	for _, t := range c.Tables {
		if n, err := slotctl.ParseTableName(t); err == nil {
			set[n.String()] = struct{}{}
		}
	}
	return set
}
