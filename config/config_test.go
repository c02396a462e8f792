package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// valid returns a Config that passes Validate.
func valid() Config {
	c := Defaults()
	c.PGDSN = testDSN
	c.KafkaBrokers = []string{"localhost:9092"}
	return c
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr []string // substrings, each must appear; nil means valid
	}{
		{name: "defaults plus required", mutate: func(*Config) {}},
		{name: "defaults alone miss the required options", mutate: func(c *Config) { *c = Defaults() }, wantErr: []string{
			"missing --pg-dsn (WALBOX_PG_DSN): expected a libpq URL",
			"missing --kafka-brokers (WALBOX_KAFKA_BROKERS): expected a comma-separated list of host:port",
		}},

		// Postgres.
		{name: "key=value DSN", mutate: func(c *Config) { c.PGDSN = "host=db port=5432 user=walbox dbname=app" }},
		{name: "malformed key=value DSN", mutate: func(c *Config) { c.PGDSN = "host=db port" }, wantErr: []string{
			// The stray word is masked: it could be a password typed without its key.
			`invalid value "host=db xxxxx" for --pg-dsn (WALBOX_PG_DSN): it cannot be parsed`,
		}},
		{name: "DSN with bad port", mutate: func(c *Config) { c.PGDSN = "postgres://u@db:http/app" }, wantErr: []string{"--pg-dsn (WALBOX_PG_DSN)", "invalid port"}},
		{name: "DSN with bad sslmode", mutate: func(c *Config) { c.PGDSN = "postgres://u@db/app?sslmode=sometimes" }, wantErr: []string{"--pg-dsn (WALBOX_PG_DSN)", "sslmode"}},
		{name: "table without schema", mutate: func(c *Config) { c.Table = "outbox" }},
		// An empty name means the owner's default (slotctl.DefaultTable);
		// config used to report it missing.
		{name: "table empty means the default", mutate: func(c *Config) { c.Table = "" }},
		{name: "table with three parts", mutate: func(c *Config) { c.Table = "db.public.outbox" }, wantErr: []string{`invalid value "db.public.outbox" for --table (WALBOX_TABLE)`}},
		{name: "table empty part", mutate: func(c *Config) { c.Table = "public." }, wantErr: []string{`invalid value "public." for --table (WALBOX_TABLE): table "public.": "": it is empty`}},
		{name: "table quoted", mutate: func(c *Config) { c.Table = `public."Outbox"` }, wantErr: []string{"--table (WALBOX_TABLE)", "without quotes"}},
		{name: "table too long", mutate: func(c *Config) { c.Table = "public." + strings.Repeat("t", 64) }, wantErr: []string{"--table (WALBOX_TABLE)", "Postgres keeps only 63"}},
		// slotctl would take its default, but the pipeline needs the name.
		{name: "publication empty", mutate: func(c *Config) { c.Publication = "" }, wantErr: []string{`invalid value "" for --publication (WALBOX_PUBLICATION): publication name is empty`}},
		{name: "publication control character", mutate: func(c *Config) { c.Publication = "a\nb" }, wantErr: []string{"--publication (WALBOX_PUBLICATION)", `it contains the character '\n'`}},
		{name: "slot upper case", mutate: func(c *Config) { c.Slot = "Walbox" }, wantErr: []string{`invalid value "Walbox" for --slot (WALBOX_SLOT): slot "Walbox": replication slot names are 1 to 63 characters of a-z, 0-9 and _`}},
		{name: "slot with dash", mutate: func(c *Config) { c.Slot = "wal-box" }, wantErr: []string{"--slot (WALBOX_SLOT)"}},
		{name: "slot 63 bytes", mutate: func(c *Config) { c.Slot = strings.Repeat("s", 63) }},
		{name: "slot 64 bytes", mutate: func(c *Config) { c.Slot = strings.Repeat("s", 64) }, wantErr: []string{"--slot (WALBOX_SLOT)"}},
		{name: "slot empty", mutate: func(c *Config) { c.Slot = "" }, wantErr: []string{`invalid value "" for --slot (WALBOX_SLOT): slot name is empty`}},
		{name: "status interval zero", mutate: func(c *Config) { c.StatusInterval = 0 }, wantErr: []string{`invalid value "0s" for --status-interval (WALBOX_STATUS_INTERVAL): expected a duration greater than 0`}},

		// Kafka.
		{name: "brokers several", mutate: func(c *Config) { c.KafkaBrokers = []string{"k1:9092", "10.0.0.2:9093", "[::1]:9094"} }},
		{name: "broker without port", mutate: func(c *Config) { c.KafkaBrokers = []string{"k1:9092", "k2"} }, wantErr: []string{`invalid value "k2" for --kafka-brokers (WALBOX_KAFKA_BROKERS): expected host:port such as localhost:9092 (missing port in address)`}},
		{name: "broker bad port", mutate: func(c *Config) { c.KafkaBrokers = []string{"k1:99999"} }, wantErr: []string{`invalid value "k1:99999" for --kafka-brokers`, "from 1 to 65535"}},
		{name: "broker port zero", mutate: func(c *Config) { c.KafkaBrokers = []string{"k1:0"} }, wantErr: []string{`invalid value "k1:0" for --kafka-brokers`}},
		{name: "broker without host", mutate: func(c *Config) { c.KafkaBrokers = []string{":9092"} }, wantErr: []string{`invalid value ":9092" for --kafka-brokers`, "the host is empty"}},
		{name: "two bad brokers, two errors", mutate: func(c *Config) { c.KafkaBrokers = []string{"a", "b"} }, wantErr: []string{`invalid value "a" for --kafka-brokers`, `invalid value "b" for --kafka-brokers`}},
		{name: "client id empty", mutate: func(c *Config) { c.ClientID = "" }, wantErr: []string{"missing --kafka-client-id (WALBOX_KAFKA_CLIENT_ID)"}},
		{name: "client id too long", mutate: func(c *Config) { c.ClientID = strings.Repeat("c", 257) }, wantErr: []string{"--kafka-client-id (WALBOX_KAFKA_CLIENT_ID): expected at most 256 bytes"}},
		{name: "linger negative", mutate: func(c *Config) { c.ProducerLinger = -time.Millisecond }, wantErr: []string{`invalid value "-1ms" for --producer-linger (WALBOX_PRODUCER_LINGER): expected a duration from 0 to 1m0s`}},
		{name: "linger too long", mutate: func(c *Config) { c.ProducerLinger = 2 * time.Minute }, wantErr: []string{"--producer-linger (WALBOX_PRODUCER_LINGER)"}},
		{name: "linger 5ms", mutate: func(c *Config) { c.ProducerLinger = 5 * time.Millisecond }},
		{name: "batch too small", mutate: func(c *Config) { c.ProducerBatchMaxBytes = 100 }, wantErr: []string{`invalid value "100" for --producer-batch-max-bytes (WALBOX_PRODUCER_BATCH_MAX_BYTES): expected a size from 512 bytes to 1GiB`}},
		{name: "batch too large", mutate: func(c *Config) { c.ProducerBatchMaxBytes = 2 << 30; c.MaxInflightBytes = 4 << 30 }, wantErr: []string{`invalid value "2GiB" for --producer-batch-max-bytes`}},
		{name: "inflight records zero", mutate: func(c *Config) { c.MaxInflightRecords = 0 }, wantErr: []string{`invalid value "0" for --max-inflight-records (WALBOX_MAX_INFLIGHT_RECORDS): expected a whole number greater than 0`}},
		{name: "inflight bytes zero", mutate: func(c *Config) { c.MaxInflightBytes = 0 }, wantErr: []string{`invalid value "0" for --max-inflight-bytes (WALBOX_MAX_INFLIGHT_BYTES): expected a size greater than 0`}},
		{name: "inflight bytes below batch", mutate: func(c *Config) { c.MaxInflightBytes = 1 << 20; c.ProducerBatchMaxBytes = 2 << 20 }, wantErr: []string{`invalid value "1MiB" for --max-inflight-bytes (WALBOX_MAX_INFLIGHT_BYTES): expected at least --producer-batch-max-bytes (2MiB)`}},

		// Routing.
		{name: "topic fixed", mutate: func(c *Config) { c.Topic = "events" }},
		{name: "topic two placeholders", mutate: func(c *Config) { c.Topic = "{aggregate_type}.{event_type}-v1" }},
		// The router validates the template (and the columns); its messages
		// are reported under the flag. Empty means its default.
		{name: "topic empty means the default", mutate: func(c *Config) { c.Topic = "" }},
		{name: "topic unclosed brace", mutate: func(c *Config) { c.Topic = "outbox.{aggregate_type" }, wantErr: []string{`invalid value "outbox.{aggregate_type" for --topic (WALBOX_TOPIC): unclosed { at offset 7`}},
		{name: "topic empty placeholder", mutate: func(c *Config) { c.Topic = "outbox.{}" }, wantErr: []string{`--topic (WALBOX_TOPIC): empty placeholder {} at offset 7`}},
		{name: "topic nested braces", mutate: func(c *Config) { c.Topic = "outbox.{a{b}}" }, wantErr: []string{`--topic (WALBOX_TOPIC): unclosed { at offset 7`}},
		{name: "topic unmatched close", mutate: func(c *Config) { c.Topic = "outbox}" }, wantErr: []string{`--topic (WALBOX_TOPIC): unmatched } at offset 6`}},
		{name: "topic bad literal", mutate: func(c *Config) { c.Topic = "outbox/{aggregate_type}" }, wantErr: []string{`--topic (WALBOX_TOPIC): literal character "/" at offset 6 is not allowed in a Kafka topic name`}},
		// A column name may contain a space; whether the table has it is
		// checked against the table at start.
		{name: "topic placeholder with a space", mutate: func(c *Config) { c.Topic = "outbox.{aggregate type}" }},
		{name: "topic placeholder quoted", mutate: func(c *Config) { c.Topic = `outbox.{"Type"}` }, wantErr: []string{"--topic (WALBOX_TOPIC): placeholder {\"Type\"} at offset 7", "without quotes"}},
		{name: "topic reserved", mutate: func(c *Config) { c.Topic = ".." }, wantErr: []string{"--topic (WALBOX_TOPIC)", `cannot be "." or ".."`}},
		{name: "topic too long", mutate: func(c *Config) { c.Topic = strings.Repeat("t", 250) }, wantErr: []string{"--topic (WALBOX_TOPIC)", "over Kafka's limit of 249"}},
		{name: "column empty means the default", mutate: func(c *Config) { c.Columns.ID = "" }},
		{name: "column quoted", mutate: func(c *Config) { c.Columns.Payload = `"Payload"` }, wantErr: []string{"--column-payload (WALBOX_COLUMN_PAYLOAD)", "without quotes"}},
		{name: "column payload as a JSON key", mutate: func(c *Config) { c.Columns.Payload = "data->>body" }, wantErr: []string{`invalid value "data->>body" for --column-payload (WALBOX_COLUMN_PAYLOAD): must be a plain column name`}},
		{name: "column aggregate id as a JSON key", mutate: func(c *Config) { c.Columns.AggregateID = "metadata->>Aggregate-Id" }},
		{name: "topic column set", mutate: func(c *Config) { c.Columns.Topic = "destination" }},
		{name: "topic column too long", mutate: func(c *Config) { c.Columns.Topic = strings.Repeat("c", 64) }, wantErr: []string{"--column-topic (WALBOX_COLUMN_TOPIC)"}},
		{name: "invalid rows unknown", mutate: func(c *Config) { c.InvalidRows = "skip" }, wantErr: []string{`invalid value "skip" for --invalid-rows (WALBOX_INVALID_ROWS): unknown policy; expected "fail" or "dead-letter"`}},
		{name: "dead letter without topic", mutate: func(c *Config) { c.InvalidRows = InvalidRowsDeadLetter }, wantErr: []string{`missing --dead-letter-topic (WALBOX_DEAD_LETTER_TOPIC): required with --invalid-rows "dead-letter"`}},
		{name: "dead letter with topic", mutate: func(c *Config) { c.InvalidRows = InvalidRowsDeadLetter; c.DeadLetterTopic = "outbox.dlq" }},
		// Drift b: the router refuses this at start; config now says so.
		{name: "dead letter topic with the fail policy", mutate: func(c *Config) { c.DeadLetterTopic = "outbox.dlq" }, wantErr: []string{`invalid value "outbox.dlq" for --dead-letter-topic (WALBOX_DEAD_LETTER_TOPIC): set, but --invalid-rows is "fail"`}},
		{name: "dead letter topic invalid", mutate: func(c *Config) { c.InvalidRows = InvalidRowsDeadLetter; c.DeadLetterTopic = "dlq {x}" }, wantErr: []string{`invalid value "dlq {x}" for --dead-letter-topic (WALBOX_DEAD_LETTER_TOPIC): topic name contains " "`}},
		{name: "dedup disabled", mutate: func(c *Config) { c.DedupWindow = 0 }},
		{name: "dedup negative", mutate: func(c *Config) { c.DedupWindow = -1 }, wantErr: []string{`invalid value "-1" for --dedup-window (WALBOX_DEDUP_WINDOW): dedup window -1 is negative`}},

		// Operations.
		{name: "metrics disabled", mutate: func(c *Config) { c.MetricsAddr = "" }},
		{name: "metrics all interfaces", mutate: func(c *Config) { c.MetricsAddr = ":9187" }},
		{name: "metrics without port", mutate: func(c *Config) { c.MetricsAddr = "localhost" }, wantErr: []string{`invalid value "localhost" for --metrics-addr (WALBOX_METRICS_ADDR): expected host:port such as 127.0.0.1:9187`}},
		{name: "shutdown timeout zero", mutate: func(c *Config) { c.ShutdownTimeout = 0 }, wantErr: []string{"--shutdown-timeout (WALBOX_SHUTDOWN_TIMEOUT): expected a duration greater than 0"}},
		{name: "backoff min zero", mutate: func(c *Config) { c.ReconnectBackoffMin = 0 }, wantErr: []string{"--reconnect-backoff-min (WALBOX_RECONNECT_BACKOFF_MIN): expected a duration greater than 0"}},
		{name: "backoff max below min", mutate: func(c *Config) { c.ReconnectBackoffMax = time.Second; c.ReconnectBackoffMin = 2 * time.Second }, wantErr: []string{`invalid value "1s" for --reconnect-backoff-max (WALBOX_RECONNECT_BACKOFF_MAX): expected at least --reconnect-backoff-min (2s)`}},
		{name: "backoff equal", mutate: func(c *Config) { c.ReconnectBackoffMax = time.Second; c.ReconnectBackoffMin = time.Second }},
		{name: "log level unknown", mutate: func(c *Config) { c.LogLevel = "verbose" }, wantErr: []string{`invalid value "verbose" for --log-level (WALBOX_LOG_LEVEL): expected one of debug, info, warn, error`}},
		{name: "log format unknown", mutate: func(c *Config) { c.LogFormat = "xml" }, wantErr: []string{`invalid value "xml" for --log-format (WALBOX_LOG_FORMAT): expected one of json, text`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid()
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate succeeded, want %q", tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			var oe *OptionError
			if !errors.As(err, &oe) {
				t.Errorf("error is not an *OptionError: %v", err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
		})
	}
}

func TestValidateCollectsAllProblems(t *testing.T) {
	c := Defaults()
	c.Slot = "Bad"
	c.StatusInterval = 0
	c.LogFormat = "xml"
	err := c.Validate()
	// pg-dsn, kafka-brokers, slot, status-interval, log-format.
	if got := len(splitJoined(err)); got != 5 {
		t.Errorf("Validate reported %d problems, want 5:\n%v", got, err)
	}
}

func TestRedactedConfig(t *testing.T) {
	c := valid()
	c.PGDSN = "postgres://walbox:Sup3rS3cret@db:5432/app?sslmode=require"
	r := c.Redacted()
	if want := "postgres://walbox:xxxxx@db:5432/app?sslmode=require"; r.PGDSN != want {
		t.Errorf("Redacted().PGDSN = %q, want %q", r.PGDSN, want)
	}
	if c.PGDSN == r.PGDSN {
		t.Error("Redacted changed the original")
	}
	r.KafkaBrokers[0] = "changed:1"
	if c.KafkaBrokers[0] == "changed:1" {
		t.Error("Redacted shares KafkaBrokers with the original")
	}
}

func TestTableName(t *testing.T) {
	tests := []struct {
		table, schema, name string
	}{
		{"public.outbox", "public", "outbox"},
		{"outbox", "public", "outbox"},
		{"Sales.Outbox", "Sales", "Outbox"},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			c := Config{Table: tt.table}
			if s, n := c.TableName(); s != tt.schema || n != tt.name {
				t.Errorf("TableName() = %q, %q, want %q, %q", s, n, tt.schema, tt.name)
			}
		})
	}
}
