package config

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/walbox/walbox/heartbeat"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/schemareg"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
	"github.com/walbox/walbox/tracing"
)

// This file declares every option exactly once: its flag, environment
// variable, YAML key, help text, how a string becomes the field's value and
// how the field is checked. Load (flags, environment, file), Usage and
// Validate are all driven by the options table below; adding an option means
// adding a field to Config, a default to Defaults and one entry here.

type group int

const (
	groupPostgres group = iota
	groupKafka
	groupRouting
	groupSchemaRegistry
	groupOperations
)

var groupNames = [...]string{
	groupPostgres:       "Postgres",
	groupKafka:          "Kafka",
	groupRouting:        "Routing",
	groupSchemaRegistry: "Formats",
	groupOperations:     "Operations",
}

// value converts between an option's text form and its Config field.
type value struct {
	arg    string // placeholder in Usage, e.g. DURATION
	expect string // what a parsable value looks like, for error messages
	// list values accept a YAML sequence as well as a comma-separated
	// string, and a repeated flag adds to the list.
	list bool
	// set parses s into the field; it fails with an error whose text is
	// expect. nil for --config, which Load handles itself.
	set func(c *Config, s string) error
	// get formats the field, for defaults in Usage and values in errors.
	get func(c *Config) string
	// raw, set for secrets (whose get redacts), returns the field as is,
	// for comparing two values; never shown.
	raw func(c *Config) string
}

type option struct {
	flag  string // without dashes
	env   string
	yaml  string // dotted path into the file; "" when it cannot be set there
	group group
	help  string // one line, no trailing period
	value value
	// check reports the field's problems (a *checkErr, or several joined);
	// it sees the whole Config so that combinations are checked where the
	// dependent option is declared. Only for what no package owns: a value
	// the router, slotctl or pipeline validates is checked there (below).
	check func(c *Config) error
	// The packages that use the value, and so validate it (problems.go):
	// router is the router.Config field it sets; slotctl and pipeline copy
	// the value into their Config (used to build it and to probe it alone).
	router   router.Field
	slotctl  func(c *Config, s *slotctl.Config)
	pipeline func(c *Config, p *pipeline.Config)
	// redact hides secrets in a value before it is shown in an error.
	redact func(string) string
}

// configOption is --config: it says where the file is, so it is read before
// everything else and has no Config field and no YAML key.
var configOption = &option{
	flag: "config", env: "WALBOX_CONFIG", group: groupOperations,
	help:  "YAML file with settings; flags and environment variables override its values",
	value: value{arg: "FILE", get: func(*Config) string { return "" }},
}

var options = []*option{
	// Postgres.
	{
		flag: "pg-dsn", env: "WALBOX_PG_DSN", yaml: "pg_dsn", group: groupPostgres,
		help:     "Postgres connection string, a libpq URL or key=value DSN, for a role with REPLICATION; a replication parameter is ignored (walbox adds it where needed)",
		value:    stringValue("DSN", func(c *Config) *string { return &c.PGDSN }),
		check:    func(c *Config) error { return checkDSN(c.PGDSN) },
		pipeline: func(c *Config, p *pipeline.Config) { p.ConnString = c.PGDSN },
		redact:   func(s string) string { r, _ := redactDSN(s); return r },
	},
	{
		flag: "table", env: "WALBOX_TABLE", yaml: "table", group: groupPostgres,
		help:    "Outbox table as schema.table, unquoted and case-sensitive as stored in the catalog; several, comma-separated, share the publication and slot",
		value:   stringValue("NAME", func(c *Config) *string { return &c.Table }),
		slotctl: func(c *Config, s *slotctl.Config) { s.Table = c.Table },
		// The relay routes only the outbox tables' inserts.
		pipeline: func(c *Config, p *pipeline.Config) { p.Tables = splitList(cmp.Or(c.Table, slotctl.DefaultTable)) },
	},
	{
		flag: "publication", env: "WALBOX_PUBLICATION", yaml: "publication", group: groupPostgres,
		help:     "Publication that pgoutput streams; it must include the outbox table",
		value:    stringValue("NAME", func(c *Config) *string { return &c.Publication }),
		slotctl:  func(c *Config, s *slotctl.Config) { s.Publication = c.Publication },
		pipeline: func(c *Config, p *pipeline.Config) { p.Publication = c.Publication },
	},
	{
		flag: "slot", env: "WALBOX_SLOT", yaml: "slot", group: groupPostgres,
		help:     "Logical replication slot holding walbox's position; lower-case letters, digits and _",
		value:    stringValue("NAME", func(c *Config) *string { return &c.Slot }),
		slotctl:  func(c *Config, s *slotctl.Config) { s.Slot = c.Slot },
		pipeline: func(c *Config, p *pipeline.Config) { p.Slot = c.Slot },
	},
	{
		flag: "pg-origin", env: "WALBOX_PG_ORIGIN", yaml: "pg_origin", group: groupPostgres,
		help: "any streams every change; none has the server leave out changes applied by logical replication from another server " +
			"(they carry a replication origin), as in a bidirectional setup: pgoutput's origin parameter, PostgreSQL 16+",
		value:    enumValue("ORIGIN", func(c *Config) *string { return &c.PGOrigin }, pipeline.Origins...),
		pipeline: func(c *Config, p *pipeline.Config) { p.Origin = c.PGOrigin },
	},
	{
		flag: "status-interval", env: "WALBOX_STATUS_INTERVAL", yaml: "status_interval", group: groupPostgres,
		help:     "How often the confirmed position is reported to Postgres; keep it well below wal_sender_timeout",
		value:    durationValue(func(c *Config) *time.Duration { return &c.StatusInterval }),
		check:    func(c *Config) error { return checkPositive(c.StatusInterval) },
		pipeline: func(c *Config, p *pipeline.Config) { p.StatusInterval = c.StatusInterval },
	},
	{
		flag: "pg-receive-timeout", env: "WALBOX_PG_RECEIVE_TIMEOUT", yaml: "pg_receive_timeout", group: groupPostgres,
		help: "A replication connection silent this long is taken as dead and reopened (a reply is requested at a quarter of it), like wal_receiver_timeout; " +
			"a smaller value is raised to the server's wal_sender_timeout, because the server may stay silent that long while it decodes a large transaction of other tables",
		value:    durationValue(func(c *Config) *time.Duration { return &c.PGReceiveTimeout }),
		check:    func(c *Config) error { return checkPositive(c.PGReceiveTimeout) },
		pipeline: func(c *Config, p *pipeline.Config) { p.ReceiveTimeout = c.PGReceiveTimeout },
	},
	{
		flag: "failover-slot", env: "WALBOX_FAILOVER_SLOT", yaml: "failover_slot", group: groupPostgres,
		help:    "Create the slot as a failover slot (PostgreSQL 17+), so a standby configured with sync_replication_slots can take it over",
		value:   boolValue(func(c *Config) *bool { return &c.FailoverSlot }),
		check:   func(*Config) error { return nil }, // any boolean; the server version is checked on start
		slotctl: func(c *Config, s *slotctl.Config) { s.Failover = c.FailoverSlot },
	},
	{
		flag: "create-slot", env: "WALBOX_CREATE_SLOT", yaml: "create_slot", group: groupPostgres,
		help:  "Create the replication slot when it is missing although the publication exists (a missing slot otherwise stops walbox: events since its position would be skipped)",
		value: boolValue(func(c *Config) *bool { return &c.CreateSlot }),
		check: func(*Config) error { return nil },
	},
	{
		flag: "slot-busy-timeout", env: "WALBOX_SLOT_BUSY_TIMEOUT", yaml: "slot_busy_timeout", group: groupPostgres,
		help:     "How long to wait for a slot held by another process (a killed predecessor lingers up to wal_sender_timeout) before stopping with an error",
		value:    durationValue(func(c *Config) *time.Duration { return &c.SlotBusyTimeout }),
		check:    func(c *Config) error { return checkPositive(c.SlotBusyTimeout) },
		pipeline: func(c *Config, p *pipeline.Config) { p.SlotBusyTimeout = c.SlotBusyTimeout },
	},
	{
		flag: "streaming", env: "WALBOX_STREAMING", yaml: "streaming", group: groupPostgres,
		help: "Have the server stream large in-progress transactions (pgoutput protocol 2+, PostgreSQL 14+) instead of spilling them to its own disk until they commit; " +
			"walbox keeps their changes in --spool-dir and sends them only after the commit. false keeps protocol 1 (for debugging)",
		value:    boolValue(func(c *Config) *bool { return &c.Streaming }),
		check:    func(*Config) error { return nil },
		pipeline: func(c *Config, p *pipeline.Config) { p.DisableStreaming = !c.Streaming },
	},
	{
		flag: "spool-dir", env: "WALBOX_SPOOL_DIR", yaml: "spool_dir", group: groupPostgres,
		help: "Directory where streamed transactions wait for their commit (a subdirectory per process, removed on exit and by the next start after a crash); " +
			"empty means walbox-spool-<uid> in the temporary directory ($TMPDIR, else /tmp), mode 0700, refused if another user owns it. Where it cannot be written, a transaction larger than the server's logical_decoding_work_mem is sent with protocol version 1 instead (the server spills it), with a warning and walbox_spool_errors_total",
		value:    stringValue("DIR", func(c *Config) *string { return &c.SpoolDir }),
		check:    func(*Config) error { return nil }, // any path; written only when a transaction streams
		pipeline: func(c *Config, p *pipeline.Config) { p.SpoolDir = c.SpoolDir },
	},
	{
		flag: "spool-max-bytes", env: "WALBOX_SPOOL_MAX_BYTES", yaml: "spool_max_bytes", group: groupPostgres,
		help:     "Most bytes of streamed, uncommitted transactions in --spool-dir; a transaction that does not fit is sent again with protocol version 1 (the server keeps it, spilling to its own disk, and sends it whole at its commit), with a warning",
		value:    sizeValue(func(c *Config) *int64 { return &c.SpoolMaxBytes }),
		pipeline: func(c *Config, p *pipeline.Config) { p.SpoolMaxBytes = c.SpoolMaxBytes },
	},

	// Kafka.
	{
		flag: "kafka-brokers", env: "WALBOX_KAFKA_BROKERS", yaml: "kafka_brokers", group: groupKafka,
		help:  "Seed brokers as host:port, comma-separated (in YAML also a list)",
		value: listValue("LIST", func(c *Config) *[]string { return &c.KafkaBrokers }),
		check: func(c *Config) error { return checkBrokers(c.KafkaBrokers) },
	},
	{
		flag: "kafka-client-id", env: "WALBOX_KAFKA_CLIENT_ID", yaml: "kafka_client_id", group: groupKafka,
		help:  "Kafka client id, shown in broker logs and used for quotas",
		value: stringValue("NAME", func(c *Config) *string { return &c.ClientID }),
		check: func(c *Config) error { return checkClientID(c.ClientID) },
	},
	{
		flag: "producer-linger", env: "WALBOX_PRODUCER_LINGER", yaml: "producer_linger", group: groupKafka,
		help:  "How long a partition's batch waits for more records; 0 sends at once",
		value: durationValue(func(c *Config) *time.Duration { return &c.ProducerLinger }),
		check: func(c *Config) error { return checkLinger(c.ProducerLinger) },
	},
	{
		flag: "producer-batch-max-bytes", env: "WALBOX_PRODUCER_BATCH_MAX_BYTES", yaml: "producer_batch_max_bytes", group: groupKafka,
		help:     "Largest record batch before compression; keep it at most the topics' max.message.bytes",
		value:    sizeIntValue(func(c *Config) *int { return &c.ProducerBatchMaxBytes }),
		check:    func(c *Config) error { return checkBatchMaxBytes(c.ProducerBatchMaxBytes) },
		pipeline: func(c *Config, p *pipeline.Config) { p.MaxBatchBytes = c.ProducerBatchMaxBytes },
	},
	{
		flag: "max-inflight-records", env: "WALBOX_MAX_INFLIGHT_RECORDS", yaml: "max_inflight_records", group: groupKafka,
		help:     "Records produced but not yet acknowledged before reading from Postgres pauses",
		value:    intValue(func(c *Config) *int { return &c.MaxInflightRecords }),
		check:    func(c *Config) error { return checkPositiveInt(c.MaxInflightRecords) },
		pipeline: func(c *Config, p *pipeline.Config) { p.MaxInflightRecords = c.MaxInflightRecords },
	},
	{
		flag: "max-inflight-bytes", env: "WALBOX_MAX_INFLIGHT_BYTES", yaml: "max_inflight_bytes", group: groupKafka,
		help:     "Bytes of those records before reading pauses; at least --producer-batch-max-bytes",
		value:    sizeValue(func(c *Config) *int64 { return &c.MaxInflightBytes }),
		check:    func(c *Config) error { return checkInflightBytes(c.MaxInflightBytes, c.ProducerBatchMaxBytes) },
		pipeline: func(c *Config, p *pipeline.Config) { p.MaxInflightBytes = c.MaxInflightBytes },
	},
	{
		flag: "delivery", env: "WALBOX_DELIVERY", yaml: "delivery", group: groupKafka,
		help: "at-least-once (a crash may send again what was in flight) or exactly-once (Kafka transactions with the position in --state-topic; " +
			"read_committed consumers see each outbox row once, whatever crashes)",
		value:    enumValue("MODE", func(c *Config) *string { return &c.Delivery }, pipeline.Deliveries...),
		pipeline: func(c *Config, p *pipeline.Config) { p.Delivery = c.Delivery },
	},
	{
		flag: "transactional-id", env: "WALBOX_TRANSACTIONAL_ID", yaml: "transactional_id", group: groupKafka,
		help: "Kafka transactional id with --delivery=exactly-once; empty means walbox-<slot>. Keep it stable per slot: " +
			"a restart with the same id fences its predecessor and finds its committed position in --state-topic",
		value:    stringValue("NAME", func(c *Config) *string { return &c.TransactionalID }),
		pipeline: func(c *Config, p *pipeline.Config) { p.TransactionalID = c.TransactionalID },
	},
	{
		flag: "transaction-max-records", env: "WALBOX_TRANSACTION_MAX_RECORDS", yaml: "transaction_max_records", group: groupKafka,
		help:     "With --delivery=exactly-once, commit a Kafka transaction at the first Postgres commit after it holds this many records",
		value:    intValue(func(c *Config) *int { return &c.TransactionMaxRecords }),
		check:    func(c *Config) error { return checkPositiveInt(c.TransactionMaxRecords) },
		pipeline: func(c *Config, p *pipeline.Config) { p.TransactionMaxRecords = c.TransactionMaxRecords },
	},
	{
		flag: "transaction-split-records", env: "WALBOX_TRANSACTION_SPLIT_RECORDS", yaml: "transaction_split_records", group: groupKafka,
		help: "With --delivery=exactly-once, commit a Kafka transaction inside a Postgres transaction once it holds this many records " +
			"(one open for half of --transaction-timeout is committed there too); the position inside the Postgres transaction is recorded, " +
			"so a restart produces only the rest, and read_committed consumers see that Postgres transaction as several Kafka transactions",
		value:    intValue(func(c *Config) *int { return &c.TransactionSplitRecords }),
		check:    func(c *Config) error { return checkPositiveInt(c.TransactionSplitRecords) },
		pipeline: func(c *Config, p *pipeline.Config) { p.TransactionSplitRecords = c.TransactionSplitRecords },
	},
	{
		flag: "transaction-max-interval", env: "WALBOX_TRANSACTION_MAX_INTERVAL", yaml: "transaction_max_interval", group: groupKafka,
		help:     "With --delivery=exactly-once, commit a Kafka transaction at the first Postgres commit after it has been open this long (at most half of --transaction-timeout)",
		value:    durationValue(func(c *Config) *time.Duration { return &c.TransactionMaxInterval }),
		check:    func(c *Config) error { return checkPositive(c.TransactionMaxInterval) },
		pipeline: func(c *Config, p *pipeline.Config) { p.TransactionMaxInterval = c.TransactionMaxInterval },
	},
	{
		flag: "transaction-timeout", env: "WALBOX_TRANSACTION_TIMEOUT", yaml: "transaction_timeout", group: groupKafka,
		help: "With --delivery=exactly-once, the Kafka transaction timeout: the broker aborts a transaction open longer, and walbox then " +
			"restarts from the committed position. A Kafka transaction open for half of it inside a Postgres transaction is committed there " +
			"(see --transaction-split-records); " +
			"at most the brokers' transaction.max.timeout.ms (checked at start)",
		value:    durationValue(func(c *Config) *time.Duration { return &c.TransactionTimeout }),
		check:    func(c *Config) error { return checkPositive(c.TransactionTimeout) },
		pipeline: func(c *Config, p *pipeline.Config) { p.TransactionTimeout = c.TransactionTimeout },
	},
	{
		flag: "state-topic", env: "WALBOX_STATE_TOPIC", yaml: "state_topic", group: groupKafka,
		help:  "With --delivery=exactly-once, the compacted topic (created if missing) holding each transactional id's committed position",
		value: stringValue("NAME", func(c *Config) *string { return &c.StateTopic }),
		check: func(c *Config) error {
			if c.StateTopic == "" {
				return badf("expected a topic name")
			}
			return nil
		},
		pipeline: func(c *Config, p *pipeline.Config) { p.StateTopic = c.StateTopic },
	},

	// Kafka security (package kafkasec; checks in kafkasec.go).
	{
		flag: "kafka-tls", env: "WALBOX_KAFKA_TLS", yaml: "kafka_tls", group: groupKafka,
		help:  "Connect to the brokers over TLS; on when any other --kafka-tls-* option is given",
		value: boolValue(func(c *Config) *bool { return &c.KafkaSecurity.TLS }),
		check: func(*Config) error { return nil },
	},
	{
		flag: "kafka-tls-ca-file", env: "WALBOX_KAFKA_TLS_CA_FILE", yaml: "kafka_tls_ca_file", group: groupKafka,
		help:  "PEM file with the CA certificates that sign the brokers' certificates; empty means the system's roots",
		value: stringValue("FILE", func(c *Config) *string { return &c.KafkaSecurity.TLSCAFile }),
		check: checkKafkaTLSCA,
	},
	{
		flag: "kafka-tls-cert-file", env: "WALBOX_KAFKA_TLS_CERT_FILE", yaml: "kafka_tls_cert_file", group: groupKafka,
		help:  "PEM client certificate for mutual TLS, with --kafka-tls-key-file",
		value: stringValue("FILE", func(c *Config) *string { return &c.KafkaSecurity.TLSCertFile }),
		check: checkKafkaTLSCert,
	},
	{
		flag: "kafka-tls-key-file", env: "WALBOX_KAFKA_TLS_KEY_FILE", yaml: "kafka_tls_key_file", group: groupKafka,
		help:  "PEM private key of --kafka-tls-cert-file (unencrypted; restrict the file's permissions)",
		value: stringValue("FILE", func(c *Config) *string { return &c.KafkaSecurity.TLSKeyFile }),
		check: checkKafkaTLSKey,
	},
	{
		flag: "kafka-tls-server-name", env: "WALBOX_KAFKA_TLS_SERVER_NAME", yaml: "kafka_tls_server_name", group: groupKafka,
		help:  "Name the brokers' certificates must carry, instead of the host walbox dials",
		value: stringValue("NAME", func(c *Config) *string { return &c.KafkaSecurity.TLSServerName }),
		check: func(*Config) error { return nil }, // any name; the TLS handshake checks it
	},
	{
		flag: "kafka-tls-insecure-skip-verify", env: "WALBOX_KAFKA_TLS_INSECURE_SKIP_VERIFY", yaml: "kafka_tls_insecure_skip_verify", group: groupKafka,
		help:  "Accept any broker certificate (no authentication of the brokers; logged as a warning at start); for tests only",
		value: boolValue(func(c *Config) *bool { return &c.KafkaSecurity.TLSInsecureSkipVerify }),
		check: func(*Config) error { return nil },
	},
	{
		flag: "kafka-sasl-mechanism", env: "WALBOX_KAFKA_SASL_MECHANISM", yaml: "kafka_sasl_mechanism", group: groupKafka,
		help:  "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM (credentials from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN); empty means no SASL",
		value: upperValue("MECHANISM", func(c *Config) *string { return &c.KafkaSecurity.SASLMechanism }),
		check: checkKafkaSASL,
	},
	{
		flag: "kafka-sasl-username", env: "WALBOX_KAFKA_SASL_USERNAME", yaml: "kafka_sasl_username", group: groupKafka,
		help:  "SASL user name for PLAIN and SCRAM",
		value: stringValue("NAME", func(c *Config) *string { return &c.KafkaSecurity.SASLUsername }),
		check: func(*Config) error { return nil }, // required by the mechanism: checkKafkaSASL
	},
	{
		flag: "kafka-sasl-password", env: "WALBOX_KAFKA_SASL_PASSWORD", yaml: "kafka_sasl_password", group: groupKafka,
		help:   "SASL password for PLAIN and SCRAM; prefer --kafka-sasl-password-file",
		value:  secretValue(func(c *Config) *string { return &c.KafkaSecurity.SASLPassword }),
		check:  func(*Config) error { return nil }, // required by the mechanism: checkKafkaSASL
		redact: redactSecret,
	},
	{
		flag: "kafka-sasl-password-file", env: "WALBOX_KAFKA_SASL_PASSWORD_FILE", yaml: "kafka_sasl_password_file", group: groupKafka,
		help:  "File holding the SASL password, re-read on every connection (so it can be rotated); wins over --kafka-sasl-password",
		value: stringValue("FILE", func(c *Config) *string { return &c.KafkaSecurity.SASLPasswordFile }),
		check: func(c *Config) error { return checkSecretFile(c.KafkaSecurity.SASLPasswordFile) },
	},
	{
		flag: "kafka-sasl-oauth-token-file", env: "WALBOX_KAFKA_SASL_OAUTH_TOKEN_FILE", yaml: "kafka_sasl_oauth_token_file", group: groupKafka,
		help:  "File holding the OAUTHBEARER token, re-read on every connection, so a refreshed token is used",
		value: stringValue("FILE", func(c *Config) *string { return &c.KafkaSecurity.SASLOAuthTokenFile }),
		check: func(c *Config) error { return checkSecretFile(c.KafkaSecurity.SASLOAuthTokenFile) },
	},

	// Routing.
	{
		flag: "topic", env: "WALBOX_TOPIC", yaml: "topic", group: groupRouting,
		help: "Destination topic template; a {placeholder} is a logical field (id, aggregate_type, aggregate_id, event_type, payload, headers, topic), " +
			"read from the column its --column-* option maps it to, or else a column or column->>key",
		value:  stringValue("TEMPLATE", func(c *Config) *string { return &c.Topic }),
		router: router.FieldTopicTemplate,
	},
	columnOption("id", "ID", "Column with the event id, sent as the event_id header", router.FieldColumnsID, func(c *Config) *string { return &c.Columns.ID }),
	columnOption("aggregate-type", "AGGREGATE_TYPE", "Column with the aggregate type", router.FieldColumnsAggregateType, func(c *Config) *string { return &c.Columns.AggregateType }),
	columnOption("aggregate-id", "AGGREGATE_ID", "Column with the aggregate id, used as the record key", router.FieldColumnsAggregateID, func(c *Config) *string { return &c.Columns.AggregateID }),
	columnOption("event-type", "EVENT_TYPE", "Column with the event type, sent as the event_type header", router.FieldColumnsEventType, func(c *Config) *string { return &c.Columns.EventType }),
	columnOption("payload", "PAYLOAD", "Column with the payload, used as the record value", router.FieldColumnsPayload, func(c *Config) *string { return &c.Columns.Payload }),
	columnOption("headers", "HEADERS", "Column with a JSON object of record headers", router.FieldColumnsHeaders, func(c *Config) *string { return &c.Columns.Headers }),
	{
		flag: "column-topic", env: "WALBOX_COLUMN_TOPIC", yaml: "columns.topic", group: groupRouting,
		help:   "Column with each row's topic, used instead of --topic; empty means unset",
		value:  stringValue("NAME", func(c *Config) *string { return &c.Columns.Topic }),
		router: router.FieldColumnsTopic,
	},
	{
		flag: "invalid-rows", env: "WALBOX_INVALID_ROWS", yaml: "invalid_rows", group: groupRouting,
		help:   "What to do with a row that cannot be routed: fail (stop before confirming it) or dead-letter",
		value:  enumValue("MODE", func(c *Config) *string { return &c.InvalidRows }, invalidRowsModes...),
		router: router.FieldInvalidRows,
	},
	{
		flag: "dead-letter-topic", env: "WALBOX_DEAD_LETTER_TOPIC", yaml: "dead_letter_topic", group: groupRouting,
		help:   "Topic that receives invalid rows; required with --invalid-rows=dead-letter",
		value:  stringValue("NAME", func(c *Config) *string { return &c.DeadLetterTopic }),
		router: router.FieldDeadLetterTopic,
		pipeline: func(c *Config, p *pipeline.Config) {
			if c.InvalidRows == InvalidRowsDeadLetter {
				p.DeadLetterTopic = c.DeadLetterTopic
			}
		},
	},
	{
		flag: "cloudevents", env: "WALBOX_CLOUDEVENTS", yaml: "cloudevents", group: groupRouting,
		help: "Send each record as a CloudEvent (Kafka protocol binding): binary adds ce_specversion, ce_id (the event id), ce_source, ce_type (the event type), " +
			"ce_time (the commit time) and content-type headers to the record; structured sends the JSON event format with the payload under data; none sends the record as it is",
		value:  enumValue("MODE", func(c *Config) *string { return &c.CloudEvents }, router.CloudEventsModes...),
		router: router.FieldCloudEventsMode,
	},
	{
		flag: "cloudevents-source", env: "WALBOX_CLOUDEVENTS_SOURCE", yaml: "cloudevents_source", group: groupRouting,
		help:  "The CloudEvents source attribute (a URI reference, e.g. /orders-service); empty is /walbox/<schema>.<table> of the row's table",
		value: stringValue("URI", func(c *Config) *string { return &c.CloudEventsSource }),
		check: checkCloudEventsSource,
	},
	{
		flag: "message-prefix", env: "WALBOX_MESSAGE_PREFIX", yaml: "message_prefix", group: groupRouting,
		help:     "Also route transactional pg_logical_emit_message events with this prefix (a JSON object with the outbox columns as keys); empty disables",
		value:    stringValue("NAME", func(c *Config) *string { return &c.MessagePrefix }),
		check:    func(c *Config) error { return checkMessagePrefix(c.MessagePrefix) },
		pipeline: func(c *Config, p *pipeline.Config) { p.MessagePrefix = c.MessagePrefix },
	},
	{
		flag: "message-prefix-allow-public", env: "WALBOX_MESSAGE_PREFIX_ALLOW_PUBLIC", yaml: "message_prefix_allow_public", group: groupRouting,
		help:  "Start with --message-prefix although PUBLIC may execute pg_logical_emit_message, so any database role can emit events (see migrations/004)",
		value: boolValue(func(c *Config) *bool { return &c.MessagePrefixAllowPublic }),
		check: func(*Config) error { return nil },
	},
	{
		flag: "dedup-window", env: "WALBOX_DEDUP_WINDOW", yaml: "dedup_window", group: groupRouting,
		help: "How many recently acknowledged events are remembered (by WAL position: commit LSN and position in the transaction) " +
			"to skip what Postgres re-sends after a reconnect; 0 disables",
		value:    intValue(func(c *Config) *int { return &c.DedupWindow }),
		pipeline: func(c *Config, p *pipeline.Config) { p.DedupWindow = c.DedupWindow },
	},

	// Schema registry (package schemareg; checks in schemareg.go).
	{
		flag: "value-format", env: "WALBOX_VALUE_FORMAT", yaml: "value_format", group: groupSchemaRegistry,
		help: "Record value format: json sends the payload as it is; avro, protobuf or json-schema check the JSON payload against the schema registered for the record " +
			"and send it in Confluent's wire format (a payload that does not fit follows --invalid-rows); pre-encoded sends a payload already in that format (a bytea column) " +
			"as it is, once its magic byte is checked and the registry holds its schema id",
		value: enumValue("FORMAT", func(c *Config) *string { return &c.ValueFormat }, valueFormats...),
		check: checkValueFormat,
	},
	{
		flag: "key-format", env: "WALBOX_KEY_FORMAT", yaml: "key_format", group: groupSchemaRegistry,
		help: "Record key format: text sends the aggregate id as it is; avro or json-schema encode it as a string with the schema registered under <topic>-key, " +
			"in Confluent's wire format (other key bytes: Kafka's default partitioner then places aggregates on other partitions)",
		value: enumValue("FORMAT", func(c *Config) *string { return &c.KeyFormat }, keyFormats...),
		check: checkKeyFormat,
	},
	{
		flag: "schema-registry-url", env: "WALBOX_SCHEMA_REGISTRY_URL", yaml: "schema_registry_url", group: groupSchemaRegistry,
		help: "Schema registry base URLs speaking the Confluent REST API, comma-separated (in YAML also a list), tried in turn when one cannot be reached; " +
			"Apicurio's is under /apis/ccompat/v7",
		value: listValue("LIST", func(c *Config) *[]string { return &c.SchemaRegistry.URLs }),
		check: checkRegistryURLs,
	},
	{
		flag: "schema-registry-user", env: "WALBOX_SCHEMA_REGISTRY_USER", yaml: "schema_registry_user", group: groupSchemaRegistry,
		help:  "User for HTTP basic authentication to the registry",
		value: stringValue("NAME", func(c *Config) *string { return &c.SchemaRegistry.BasicAuthUser }),
		check: checkRegistryUser,
	},
	{
		flag: "schema-registry-password", env: "WALBOX_SCHEMA_REGISTRY_PASSWORD", yaml: "schema_registry_password", group: groupSchemaRegistry,
		help:   "Password of --schema-registry-user; prefer --schema-registry-password-file",
		value:  secretValue(func(c *Config) *string { return &c.SchemaRegistry.BasicAuthPassword }),
		check:  checkRegistryPassword,
		redact: redactSecret,
	},
	{
		flag: "schema-registry-password-file", env: "WALBOX_SCHEMA_REGISTRY_PASSWORD_FILE", yaml: "schema_registry_password_file", group: groupSchemaRegistry,
		help:  "File holding the password of --schema-registry-user, read at start; wins over --schema-registry-password",
		value: stringValue("FILE", func(c *Config) *string { return &c.SchemaRegistry.BasicAuthPasswordFile }),
		check: checkRegistryPasswordFile,
	},
	{
		flag: "schema-registry-bearer-token", env: "WALBOX_SCHEMA_REGISTRY_BEARER_TOKEN", yaml: "schema_registry_bearer_token", group: groupSchemaRegistry,
		help:   "Bearer token for the registry, instead of basic authentication; prefer --schema-registry-bearer-token-file",
		value:  secretValue(func(c *Config) *string { return &c.SchemaRegistry.BearerToken }),
		check:  checkRegistryToken,
		redact: redactSecret,
	},
	{
		flag: "schema-registry-bearer-token-file", env: "WALBOX_SCHEMA_REGISTRY_BEARER_TOKEN_FILE", yaml: "schema_registry_bearer_token_file", group: groupSchemaRegistry,
		help:  "File holding the registry's bearer token, read at start; wins over --schema-registry-bearer-token",
		value: stringValue("FILE", func(c *Config) *string { return &c.SchemaRegistry.BearerTokenFile }),
		check: checkRegistryTokenFile,
	},
	{
		flag: "schema-registry-tls-ca-file", env: "WALBOX_SCHEMA_REGISTRY_TLS_CA_FILE", yaml: "schema_registry_tls_ca_file", group: groupSchemaRegistry,
		help:  "PEM file with the CA certificates that sign the registry's certificate; empty means the system's roots",
		value: stringValue("FILE", func(c *Config) *string { return &c.SchemaRegistry.TLSCAFile }),
		check: checkRegistryTLSCA,
	},
	{
		flag: "schema-registry-tls-cert-file", env: "WALBOX_SCHEMA_REGISTRY_TLS_CERT_FILE", yaml: "schema_registry_tls_cert_file", group: groupSchemaRegistry,
		help:  "PEM client certificate for mutual TLS with the registry, with --schema-registry-tls-key-file",
		value: stringValue("FILE", func(c *Config) *string { return &c.SchemaRegistry.TLSCertFile }),
		check: checkRegistryTLSCert,
	},
	{
		flag: "schema-registry-tls-key-file", env: "WALBOX_SCHEMA_REGISTRY_TLS_KEY_FILE", yaml: "schema_registry_tls_key_file", group: groupSchemaRegistry,
		help:  "PEM private key of --schema-registry-tls-cert-file (unencrypted; restrict the file's permissions)",
		value: stringValue("FILE", func(c *Config) *string { return &c.SchemaRegistry.TLSKeyFile }),
		check: checkRegistryTLSKey,
	},
	{
		flag: "schema-registry-tls-server-name", env: "WALBOX_SCHEMA_REGISTRY_TLS_SERVER_NAME", yaml: "schema_registry_tls_server_name", group: groupSchemaRegistry,
		help:  "Name the registry's certificate must carry, instead of the URL's host",
		value: stringValue("NAME", func(c *Config) *string { return &c.SchemaRegistry.TLSServerName }),
		check: checkRegistryServerName,
	},
	{
		flag: "schema-registry-timeout", env: "WALBOX_SCHEMA_REGISTRY_TIMEOUT", yaml: "schema_registry_timeout", group: groupSchemaRegistry,
		help:  "Longest wait for one answer of the registry",
		value: durationValue(func(c *Config) *time.Duration { return &c.SchemaRegistry.RequestTimeout }),
		check: func(c *Config) error { return checkPositive(c.SchemaRegistry.RequestTimeout) },
	},
	{
		flag: "schema-registry-retry-budget", env: "WALBOX_SCHEMA_REGISTRY_RETRY_BUDGET", yaml: "schema_registry_retry_budget", group: groupSchemaRegistry,
		help: "How long an unreachable registry, a timeout, a 5xx or a 429 is retried (backoff from 100ms to 5s) when a record's schema is not cached, " +
			"before walbox stops without confirming the record; refusals (401, 403, an unknown subject or version) stop at once",
		value: durationValue(func(c *Config) *time.Duration { return &c.SchemaRegistry.RetryBudget }),
		check: func(c *Config) error { return checkPositive(c.SchemaRegistry.RetryBudget) },
	},
	{
		flag: "value-schema-source", env: "WALBOX_VALUE_SCHEMA_SOURCE", yaml: "value_schema_source", group: groupSchemaRegistry,
		help: "Where the value's schema comes from: registered reads it from the registry (the subject's latest, or the pinned version or id); " +
			"inferred derives an Avro schema from each JSON payload by Debezium's rules (table.expand.json.payload=true with Apicurio's AvroConverter), " +
			"registers it under <topic>-value and encodes with it (--value-format avro only)",
		value: enumValue("SOURCE", func(c *Config) *string { return &c.ValueSchema.Source }, schemareg.Sources...),
		check: checkSchemaSource,
	},
	{
		flag: "value-subject-strategy", env: "WALBOX_VALUE_SUBJECT_STRATEGY", yaml: "value_subject_strategy", group: groupSchemaRegistry,
		help: "Subject the value's schema is registered under: topic is <topic>-value (Confluent's TopicNameStrategy), record is --value-record-name (RecordNameStrategy), " +
			"topic-record is <topic>-<record name> (TopicRecordNameStrategy)",
		value: enumValue("STRATEGY", func(c *Config) *string { return &c.ValueSchema.Strategy }, schemareg.Strategies...),
		check: checkSubjectStrategy,
	},
	{
		flag: "value-record-name", env: "WALBOX_VALUE_RECORD_NAME", yaml: "value_record_name", group: groupSchemaRegistry,
		help:  "Fully-qualified record name (e.g. shop.Order) for --value-subject-strategy record or topic-record",
		value: stringValue("NAME", func(c *Config) *string { return &c.ValueSchema.RecordName }),
		check: checkRecordName,
	},
	{
		flag: "value-schema-version", env: "WALBOX_VALUE_SCHEMA_VERSION", yaml: "value_schema_version", group: groupSchemaRegistry,
		help:  "Subject version whose schema encodes the values; 0 is the latest, read once per subject at its first record (a version registered later is used after a restart)",
		value: intValue(func(c *Config) *int { return &c.ValueSchema.Version }),
		check: checkSchemaVersion,
	},
	{
		flag: "value-schema-id", env: "WALBOX_VALUE_SCHEMA_ID", yaml: "value_schema_id", group: groupSchemaRegistry,
		help:  "Schema id that encodes every value, instead of looking the subject up; 0 looks it up",
		value: intValue(func(c *Config) *int { return &c.ValueSchema.ID }),
		check: checkSchemaID,
	},
	{
		flag: "schema-cache-size", env: "WALBOX_SCHEMA_CACHE_SIZE", yaml: "schema_cache_size", group: groupSchemaRegistry,
		help:  "Most subjects whose schema is kept compiled (least recently used dropped first, and read again from the registry when met)",
		value: intValue(func(c *Config) *int { return &c.ValueSchema.CacheSize }),
		check: func(c *Config) error { return checkPositiveInt(c.ValueSchema.CacheSize) },
	},
	{
		flag: "schema-latest-ttl", env: "WALBOX_SCHEMA_LATEST_TTL", yaml: "schema_latest_ttl", group: groupSchemaRegistry,
		help: "How long a subject's latest version is used before it is read again (a version registered meanwhile is used from then on; " +
			"a registry that is down then keeps the cached one); 0 reads it once per subject. Confluent's latest.cache.ttl.sec",
		value: durationValue(func(c *Config) *time.Duration { return &c.ValueSchema.LatestTTL }),
		check: checkLatestTTL,
	},
	{
		flag: "value-protobuf-message", env: "WALBOX_VALUE_PROTOBUF_MESSAGE", yaml: "value_protobuf_message", group: groupSchemaRegistry,
		help:  "Fully-qualified name of the message a protobuf schema encodes the value as; empty is the file's first message",
		value: stringValue("NAME", func(c *Config) *string { return &c.ValueSchema.ProtobufMessage }),
		check: checkProtobufMessage,
	},

	// Operations.
	configOption,
	{
		flag: "metrics-addr", env: "WALBOX_METRICS_ADDR", yaml: "metrics_addr", group: groupOperations,
		help:  "Listen address of the Prometheus /metrics endpoint; empty disables it",
		value: stringValue("ADDR", func(c *Config) *string { return &c.MetricsAddr }),
		check: func(c *Config) error { return checkMetricsAddr(c.MetricsAddr) },
	},
	{
		flag: "shutdown-timeout", env: "WALBOX_SHUTDOWN_TIMEOUT", yaml: "shutdown_timeout", group: groupOperations,
		help:     "How long shutdown waits for in-flight records to be acknowledged",
		value:    durationValue(func(c *Config) *time.Duration { return &c.ShutdownTimeout }),
		check:    func(c *Config) error { return checkPositive(c.ShutdownTimeout) },
		pipeline: func(c *Config, p *pipeline.Config) { p.ShutdownTimeout = c.ShutdownTimeout },
	},
	{
		flag: "reconnect-backoff-min", env: "WALBOX_RECONNECT_BACKOFF_MIN", yaml: "reconnect_backoff_min", group: groupOperations,
		help: "First wait before reconnecting after a lost connection; for 2 minutes after a replication session that streamed for 10 s or more is lost, " +
			"and for up to 10 minutes while the server answers but is not a writable primary (a standby being promoted), every wait stays at this one instead of doubling",
		value:    durationValue(func(c *Config) *time.Duration { return &c.ReconnectBackoffMin }),
		check:    func(c *Config) error { return checkPositive(c.ReconnectBackoffMin) },
		pipeline: func(c *Config, p *pipeline.Config) { p.BackoffMin = c.ReconnectBackoffMin },
	},
	{
		flag: "reconnect-backoff-max", env: "WALBOX_RECONNECT_BACKOFF_MAX", yaml: "reconnect_backoff_max", group: groupOperations,
		help:     "Longest wait between reconnection attempts (the wait doubles up to it once the fast retries of --reconnect-backoff-min are over)",
		value:    durationValue(func(c *Config) *time.Duration { return &c.ReconnectBackoffMax }),
		check:    func(c *Config) error { return checkBackoffMax(c.ReconnectBackoffMax, c.ReconnectBackoffMin) },
		pipeline: func(c *Config, p *pipeline.Config) { p.BackoffMax = c.ReconnectBackoffMax },
	},
	{
		flag: "lost-session-flush-timeout", env: "WALBOX_LOST_SESSION_FLUSH_TIMEOUT", yaml: "lost_session_flush_timeout", group: groupOperations,
		help: "How long, after the replication session is lost, Kafka may still acknowledge the records walbox had produced; " +
			"the rest are purged instead of retried, so that they cannot land after what the slot's next holder sends (it sends them again)",
		value:    durationValue(func(c *Config) *time.Duration { return &c.LostSessionFlushTimeout }),
		check:    func(c *Config) error { return checkPositive(c.LostSessionFlushTimeout) },
		pipeline: func(c *Config, p *pipeline.Config) { p.LostSessionFlushTimeout = c.LostSessionFlushTimeout },
	},
	{
		flag: "log-level", env: "WALBOX_LOG_LEVEL", yaml: "log_level", group: groupOperations,
		help:  "Least severe level logged: debug, info, warn or error",
		value: enumValue("LEVEL", func(c *Config) *string { return &c.LogLevel }, logLevels...),
		check: func(c *Config) error { return checkEnum(c.LogLevel, logLevels...) },
	},
	{
		flag: "log-format", env: "WALBOX_LOG_FORMAT", yaml: "log_format", group: groupOperations,
		help:  "Log format: json or text",
		value: enumValue("FORMAT", func(c *Config) *string { return &c.LogFormat }, logFormats...),
		check: func(c *Config) error { return checkEnum(c.LogFormat, logFormats...) },
	},

	// Tracing: the OTEL_* variables switch it on and configure the SDK
	// (docs/tracing.md); these options cover what they do not.
	{
		flag: "tracing-parent", env: "WALBOX_TRACING_PARENT", yaml: "tracing.parent", group: groupOperations,
		help: "How an event's producer span relates to the span in its row's traceparent: child (in the writer's trace) " +
			"or link (the root of a new trace, linked to the row's span)",
		value: enumValue("MODE", func(c *Config) *string { return &c.TracingParent }, tracingParents...),
		check: func(c *Config) error { return checkEnum(c.TracingParent, tracingParents...) },
	},
	{
		flag: "tracing-traceparent", env: "WALBOX_TRACING_TRACEPARENT", yaml: "tracing.traceparent", group: groupOperations,
		help: "Which trace context a traced record's traceparent header carries: producer (walbox's span, so the consumer's span is its child) " +
			"or row (the row's own, unchanged)",
		value: enumValue("MODE", func(c *Config) *string { return &c.TracingTraceparent }, tracingOutgoing...),
		check: func(c *Config) error { return checkEnum(c.TracingTraceparent, tracingOutgoing...) },
	},
	{
		flag: "tracing-context-header", env: "WALBOX_TRACING_CONTEXT_HEADER", yaml: "tracing.context_header", group: groupOperations,
		help:  "Record header holding the row's W3C trace context: a traceparent, or a Java properties text with a traceparent= line",
		value: stringValue("NAME", func(c *Config) *string { return &c.TracingContextHeader }),
		check: func(c *Config) error {
			if c.TracingContextHeader == "" {
				return badf("expected a header name")
			}
			return nil
		},
	},
	{
		flag: "tracing-span-name", env: "WALBOX_TRACING_SPAN_NAME", yaml: "tracing.span_name", group: groupOperations,
		help:  "Name of the producer spans; empty means \"send <topic>\", the OpenTelemetry messaging conventions' name",
		value: stringValue("NAME", func(c *Config) *string { return &c.TracingSpanName }),
		check: func(c *Config) error {
			if strings.ContainsAny(c.TracingSpanName, "\r\n") || len(c.TracingSpanName) > 255 {
				return badf("expected one line of at most 255 bytes")
			}
			return nil
		},
	},

	// Takeover from a polling relay (package snapshot validates).
	{
		flag: "snapshot", env: "WALBOX_SNAPSHOT", yaml: "snapshot", group: groupPostgres,
		help: "When walbox creates the slot, also send the outbox rows committed before it, read in the slot's exported snapshot: " +
			"none, pending (the rows --snapshot-where selects) or all; ignored once the slot exists and its snapshot finished",
		value: enumValue("MODE", func(c *Config) *string { return &c.Snapshot }, snapshot.Modes...),
		check: func(c *Config) error {
			if m, err := snapshot.ParseMode(c.Snapshot); err == nil && m != snapshot.ModeNone && len(splitList(c.Table)) > 1 {
				return badf("a takeover snapshot reads one outbox table, and --table names %d; start with --snapshot none", len(splitList(c.Table)))
			}
			return snapshotCheck(snapshot.ParseMode(c.Snapshot))
		},
	},
	{
		flag: "snapshot-where", env: "WALBOX_SNAPSHOT_WHERE", yaml: "snapshot_where", group: groupPostgres,
		help:  "SQL condition selecting the rows the old relay has not sent, such as \"sent_at IS NULL\"; required with --snapshot pending",
		value: stringValue("SQL", func(c *Config) *string { return &c.SnapshotWhere }),
		check: func(c *Config) error {
			m, err := snapshot.ParseMode(c.Snapshot)
			if err != nil {
				return nil // reported under --snapshot
			}
			return snapshotCheck(m, snapshot.CheckWhere(m, c.SnapshotWhere))
		},
	},
	{
		flag: "snapshot-order", env: "WALBOX_SNAPSHOT_ORDER", yaml: "snapshot_order", group: groupPostgres,
		help: "Columns, comma-separated, in whose ascending order the snapshot's rows are sent; they must follow each aggregate's commit order " +
			"(a bigserial id, or created_at,id); empty means the --column-id column",
		value: stringValue("COLUMNS", func(c *Config) *string { return &c.SnapshotOrder }),
		check: func(c *Config) error {
			_, err := snapshot.ParseOrder(c.SnapshotOrder, c.Columns.ID)
			return snapshotCheck("", err)
		},
	},
	{
		flag: "replay-window", env: "WALBOX_REPLAY_WINDOW", yaml: "replay_window", group: groupOperations,
		help: "Keep a trailing slot (--replay-slot) about this far behind the live slot, so walbox replay can stream that window again; " +
			"its WAL and catalog rows stay on the server; 0 disables",
		value: durationValue(func(c *Config) *time.Duration { return &c.ReplayWindow }),
		check: func(c *Config) error { return checkReplay(c, c.ReplayWindow < 0) },
	},
	{
		flag: "replay-slot", env: "WALBOX_REPLAY_SLOT", yaml: "replay_slot", group: groupOperations,
		help:  "Name of the trailing slot kept by --replay-window and read by walbox replay; empty means <slot>_replay",
		value: stringValue("NAME", func(c *Config) *string { return &c.ReplaySlot }),
		check: func(c *Config) error { return checkReplay(c, c.ReplayWindow >= 0) },
	},
	{
		flag: "standby", env: "WALBOX_STANDBY", yaml: "standby", group: groupOperations,
		help: "Wait without a time limit while another instance holds the slot, retrying every second, and take over when it frees " +
			"(run two or more with the same slot; --slot-busy-timeout then does not apply)",
		value:    boolValue(func(c *Config) *bool { return &c.Standby }),
		check:    func(*Config) error { return nil },
		pipeline: func(c *Config, p *pipeline.Config) { p.Standby = c.Standby },
	},
	// Debezium mode (package debezium translates; checks in debezium.go).
	{
		flag: "debezium-config", env: "WALBOX_DEBEZIUM_CONFIG", yaml: "debezium_config", group: groupRouting,
		help: "Run as a drop-in for Debezium: a Kafka Connect .properties (or REST JSON) of the Postgres connector with the outbox EventRouter; " +
			"its settings give the records and the options it maps, which explicit flags, variables and YAML keys override",
		value: stringValue("FILE", func(c *Config) *string { return &c.DebeziumConfig }),
		check: checkDebeziumConfig,
	},
	{
		flag: "debezium-worker-config", env: "WALBOX_DEBEZIUM_WORKER_CONFIG", yaml: "debezium_worker_config", group: groupRouting,
		help:  "The Connect worker's .properties for --debezium-config: bootstrap.servers, key/value converters, producer.* and their security settings",
		value: stringValue("FILE", func(c *Config) *string { return &c.DebeziumWorkerConfig }),
		check: func(c *Config) error {
			if c.DebeziumWorkerConfig != "" && c.DebeziumConfig == "" {
				return badf("only with --debezium-config (WALBOX_DEBEZIUM_CONFIG)")
			}
			return nil
		},
	},
	{
		flag: "heartbeat-interval", env: "WALBOX_HEARTBEAT_INTERVAL", yaml: "heartbeat_interval", group: groupOperations,
		help: "Emit a heartbeat message into the WAL this often and time its way back through the slot " +
			"(walbox_heartbeat_lag_seconds), and read the slot's lag (walbox_slot_lag_bytes); 0 disables both",
		value: durationValue(func(c *Config) *time.Duration { return &c.HeartbeatInterval }),
		check: func(c *Config) error { return checkNonNegative(c.HeartbeatInterval) },
		pipeline: func(c *Config, p *pipeline.Config) {
			p.Heartbeats = c.HeartbeatInterval > 0
			// Where no heartbeat can be written, on a standby, 0 is
			// how an operator says walbox decodes from one on purpose.
			p.DecodeFromStandby = c.HeartbeatInterval == 0
		},
	},
}

func checkNonNegative(d time.Duration) error {
	if d < 0 {
		return badf("expected a duration of 0 (off) or more, such as 10s")
	}
	return nil
}

// snapshotCheck turns an error of package snapshot into a check error.
func snapshotCheck[T any](_ T, err error) error {
	if err == nil {
		return nil
	}
	return badf("%s", strings.TrimPrefix(err.Error(), snapshot.ErrInvalidConfig.Error()+": "))
}

// checkReplay reports retention.Validate's verdict on the replay options
// under one of them: the window's problem under --replay-window (mine is
// true there when the window is negative), a name's under --replay-slot.
func checkReplay(c *Config, mine bool) error {
	if !mine {
		return nil
	}
	if c.ReplaySlot == "" && (c.ReplayWindow == 0 || slotctl.ValidateSlotName(c.Slot) != nil) {
		// The default name is checked where it is used (walbox replay
		// checks it too), and when made from a bad --slot, that option's
		// own error says it.
		return nil
	}
	if err := retention.Validate(c.ReplayWindow, c.Slot, c.ReplaySlot); err != nil {
		return badf("%s", strings.TrimPrefix(err.Error(), retention.ErrInvalidConfig.Error()+": "))
	}
	return nil
}

// Accepted values of the enumerated options.
var (
	invalidRowsModes = []string{InvalidRowsFail, InvalidRowsDeadLetter}
	logLevels        = []string{"debug", "info", "warn", "error"}
	logFormats       = []string{"json", "text"}
)

// columnOption declares one of the outbox column options, which the router
// validates; flag, environment variable and YAML key follow one pattern
// (column-id, WALBOX_COLUMN_ID, columns.id).
func columnOption(flag, env, help string, field router.Field, get func(*Config) *string) *option {
	return &option{
		flag: "column-" + flag, env: "WALBOX_COLUMN_" + env,
		yaml: "columns." + strings.ReplaceAll(flag, "-", "_"), group: groupRouting,
		help:   help,
		value:  stringValue("NAME", get),
		router: field,
	}
}

// checkErr is what an option's check returns; errorFor turns it into an
// *OptionError carrying the option's names.
type checkErr struct {
	missing bool
	value   *string // when set, the offending part of the value (one broker of a list)
	reason  string
}

func (e *checkErr) Error() string { return e.reason }

func missingf(format string, args ...any) error {
	return &checkErr{missing: true, reason: fmt.Sprintf(format, args...)}
}

func badf(format string, args ...any) error {
	return &checkErr{reason: fmt.Sprintf(format, args...)}
}

func badValuef(v, format string, args ...any) error {
	return &checkErr{value: &v, reason: fmt.Sprintf(format, args...)}
}

// errorFor builds the *OptionError for value v of o; err is a *checkErr or
// a parse error whose text is the reason.
func (o *option) errorFor(v string, err error, where string) *OptionError {
	oe := &OptionError{Flag: o.flag, Env: o.env, Value: v, Reason: err.Error(), Where: where}
	if where != "" && where != "environment" {
		oe.Key = o.yaml // from the file
	}
	var ce *checkErr
	if errors.As(err, &ce) {
		oe.Missing = ce.missing
		if ce.value != nil {
			oe.Value = *ce.value
		}
	}
	if oe.Missing {
		oe.Value = ""
	}
	if o.redact != nil {
		oe.Value = o.redact(oe.Value)
	}
	return oe
}

// splitJoined undoes errors.Join, so that a check can report several
// problems (two bad brokers) as separate *OptionErrors.
func splitJoined(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// Value kinds.

func stringValue(arg string, field func(*Config) *string) value {
	return value{
		arg:    arg,
		expect: "expected a string",
		set:    func(c *Config, s string) error { *field(c) = strings.TrimSpace(s); return nil },
		get:    func(c *Config) string { return *field(c) },
	}
}

// enumValue is one of allowed, compared case-insensitively: it is stored
// in lower case, and the option's check (checkEnum) rejects other values.
func enumValue(arg string, field func(*Config) *string, allowed ...string) value {
	return value{
		arg:    arg,
		expect: "expected one of " + strings.Join(allowed, ", "),
		set: func(c *Config, s string) error {
			*field(c) = strings.ToLower(strings.TrimSpace(s))
			return nil
		},
		get: func(c *Config) string { return *field(c) },
	}
}

const expectDuration = "expected a Go duration such as 1s or 500ms"

func durationValue(field func(*Config) *time.Duration) value {
	return value{
		arg:    "DURATION",
		expect: expectDuration,
		set: func(c *Config, s string) error {
			d, err := time.ParseDuration(strings.TrimSpace(s))
			if err != nil {
				return errors.New(expectDuration)
			}
			*field(c) = d
			return nil
		},
		get: func(c *Config) string { return field(c).String() },
	}
}

const expectBool = "expected true or false"

func boolValue(field func(*Config) *bool) value {
	return value{
		arg:    "BOOL",
		expect: expectBool,
		set: func(c *Config, s string) error {
			b, err := strconv.ParseBool(strings.TrimSpace(s))
			if err != nil {
				return errors.New(expectBool)
			}
			*field(c) = b
			return nil
		},
		get: func(c *Config) string { return strconv.FormatBool(*field(c)) },
	}
}

const expectInt = "expected a whole number such as 10000"

func intValue(field func(*Config) *int) value {
	return value{
		arg:    "N",
		expect: expectInt,
		set: func(c *Config, s string) error {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil {
				return errors.New(expectInt)
			}
			*field(c) = n
			return nil
		},
		get: func(c *Config) string { return strconv.Itoa(*field(c)) },
	}
}

const expectSize = "expected a size in bytes such as 1048576, 64MiB or 1MB (units B, KB, MB, GB, KiB, MiB, GiB)"

func sizeValue(field func(*Config) *int64) value {
	return value{
		arg:    "SIZE",
		expect: expectSize,
		set: func(c *Config, s string) error {
			n, err := parseSize(s)
			if err != nil {
				return errors.New(expectSize)
			}
			*field(c) = n
			return nil
		},
		get: func(c *Config) string { return formatSize(*field(c)) },
	}
}

func sizeIntValue(field func(*Config) *int) value {
	return value{
		arg:    "SIZE",
		expect: expectSize,
		set: func(c *Config, s string) error {
			n, err := parseSize(s)
			if err != nil || int64(int(n)) != n {
				return errors.New(expectSize)
			}
			*field(c) = int(n)
			return nil
		},
		get: func(c *Config) string { return formatSize(int64(*field(c))) },
	}
}

func listValue(arg string, field func(*Config) *[]string) value {
	return value{
		arg:    arg,
		expect: "expected a comma-separated string or, in YAML, a list",
		list:   true,
		set:    func(c *Config, s string) error { *field(c) = splitList(s); return nil },
		get:    func(c *Config) string { return strings.Join(*field(c), ",") },
	}
}

// Checks. Each returns nil, a *checkErr, or several joined.

// checkMessagePrefix keeps the prefix to what pg_logical_emit_message can
// carry and a log line can show: no NUL, no control characters.
func checkMessagePrefix(p string) error {
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return badf("a prefix without control characters")
		}
	}
	if p == heartbeat.Prefix {
		return badf("a prefix other than %q, which walbox's heartbeats use", heartbeat.Prefix)
	}
	return nil
}

func checkPositive(d time.Duration) error {
	if d <= 0 {
		return badf("expected a duration greater than 0, such as 1s or 500ms")
	}
	return nil
}

func checkPositiveInt(n int) error {
	if n <= 0 {
		return badf("expected a whole number greater than 0")
	}
	return nil
}

var (
	tracingParents  = []string{string(tracing.ParentChild), string(tracing.ParentLink)}
	tracingOutgoing = []string{string(tracing.OutgoingProducer), string(tracing.OutgoingRow)}
)

func checkEnum(s string, allowed ...string) error {
	for _, a := range allowed {
		if s == a {
			return nil
		}
	}
	return badf("expected one of %s", strings.Join(allowed, ", "))
}

func checkBrokers(brokers []string) error {
	if len(brokers) == 0 {
		return missingf("expected a comma-separated list of host:port such as localhost:9092")
	}
	var errs []error
	for _, b := range brokers {
		if why := hostPortProblem(b, true); why != "" {
			errs = append(errs, badValuef(b, "expected host:port such as localhost:9092 (%s)", why))
		}
	}
	return errors.Join(errs...)
}

func checkMetricsAddr(addr string) error {
	if addr == "" {
		return nil
	}
	if why := hostPortProblem(addr, false); why != "" {
		return badf("expected host:port such as 127.0.0.1:9187 or :9187, or empty to disable (%s)", why)
	}
	return nil
}

// franz-go's limits, checked here so that the user hears about them before
// the client is built.
const (
	maxClientIDLen = 256
	minBatchBytes  = 512
	maxBatchBytes  = 1 << 30
	maxLinger      = time.Minute
)

func checkClientID(id string) error {
	if id == "" {
		return missingf("expected a client id such as walbox")
	}
	if len(id) > maxClientIDLen {
		return badf("expected at most %d bytes (franz-go's limit)", maxClientIDLen)
	}
	return nil
}

func checkLinger(d time.Duration) error {
	if d < 0 || d > maxLinger {
		return badf("expected a duration from 0 to %s such as 5ms (franz-go's limit)", maxLinger)
	}
	return nil
}

func checkBatchMaxBytes(n int) error {
	if n < minBatchBytes || n > maxBatchBytes {
		return badf("expected a size from %d bytes to 1GiB (franz-go's limits)", minBatchBytes)
	}
	return nil
}

func checkInflightBytes(n int64, batch int) error {
	if n <= 0 {
		return badf("expected a size greater than 0 such as 64MiB")
	}
	// franz-go fails at once a record larger than its buffer limit, so a
	// buffer smaller than a batch would reject records Kafka accepts.
	if n < int64(batch) {
		return badf("expected at least --producer-batch-max-bytes (%s), or a record that fits a batch could never be buffered", formatSize(int64(batch)))
	}
	return nil
}

func checkBackoffMax(maxWait, minWait time.Duration) error {
	if maxWait <= 0 {
		return badf("expected a duration greater than 0, such as 30s")
	}
	if maxWait < minWait {
		return badf("expected at least --reconnect-backoff-min (%s)", minWait)
	}
	return nil
}
