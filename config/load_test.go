package config

import (
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

const testDSN = "postgres://walbox:pw@localhost:5432/app"

// load runs Load with file (if not empty) written to a temporary file and
// passed with --config, and env as the environment. pg-dsn and
// kafka-brokers, which every case needs, are added to the environment unless
// some source of the case sets them.
func load(t *testing.T, args []string, env map[string]string, file string) (Config, error) {
	t.Helper()
	env = withRequired(args, env, file)
	if file != "" {
		// Not t.TempDir(): its name comes from the test's, which may hold a
		// password that errors must not show (the file's path is shown).
		dir, err := os.MkdirTemp("", "walbox-config-test")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		path := filepath.Join(dir, "walbox.yaml")
		if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
			t.Fatal(err)
		}
		args = append([]string{"--config", path}, args...)
	}
	var out strings.Builder
	return Load(args, func(k string) string { return env[k] }, &out)
}

func withRequired(args []string, env map[string]string, file string) map[string]string {
	merged := map[string]string{}
	for k, v := range env {
		merged[k] = v
	}
	given := func(flagName, envName, yamlKey string) bool {
		_, inEnv := env[envName]
		return inEnv || strings.Contains(file, yamlKey+":") || slices.ContainsFunc(args, func(a string) bool {
			return strings.HasPrefix(a, "--"+flagName) || strings.HasPrefix(a, "-"+flagName)
		})
	}
	if !given("pg-dsn", "WALBOX_PG_DSN", "pg_dsn") {
		merged["WALBOX_PG_DSN"] = testDSN
	}
	if !given("kafka-brokers", "WALBOX_KAFKA_BROKERS", "kafka_brokers") {
		merged["WALBOX_KAFKA_BROKERS"] = "localhost:9092"
	}
	return merged
}

func TestLoadPrecedence(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		file string
		got  func(Config) any
		want any
	}{
		// A string.
		{name: "string default", got: slot, want: "walbox"},
		{name: "string file beats default", file: "slot: from_file\n", got: slot, want: "from_file"},
		{name: "string env beats file", file: "slot: from_file\n", env: map[string]string{"WALBOX_SLOT": "from_env"}, got: slot, want: "from_env"},
		{
			name: "string flag beats env and file",
			args: []string{"--slot", "from_flag"}, env: map[string]string{"WALBOX_SLOT": "from_env"}, file: "slot: from_file\n",
			got: slot, want: "from_flag",
		},
		{name: "string flag with = and one dash", args: []string{"-slot=one_dash"}, got: slot, want: "one_dash"},
		{name: "string repeated flag keeps the last", args: []string{"--slot", "a", "--slot", "b"}, got: slot, want: "b"},
		{name: "empty env counts as unset", file: "slot: from_file\n", env: map[string]string{"WALBOX_SLOT": ""}, got: slot, want: "from_file"},
		{name: "null YAML value counts as unset", file: "slot:\n", got: slot, want: "walbox"},

		// A duration.
		{name: "duration default", got: statusInterval, want: time.Second},
		{name: "duration file beats default", file: "status_interval: 2s\n", got: statusInterval, want: 2 * time.Second},
		{name: "duration env beats file", file: "status_interval: 2s\n", env: map[string]string{"WALBOX_STATUS_INTERVAL": "3s"}, got: statusInterval, want: 3 * time.Second},
		{
			name: "duration flag beats env and file",
			args: []string{"--status-interval=250ms"}, env: map[string]string{"WALBOX_STATUS_INTERVAL": "3s"}, file: "status_interval: 2s\n",
			got: statusInterval, want: 250 * time.Millisecond,
		},

		// A list.
		{name: "list file as YAML list", file: "kafka_brokers:\n  - f1:9092\n  - f2:9092\n", got: brokers, want: []string{"f1:9092", "f2:9092"}},
		{name: "list file as flow list", file: "kafka_brokers: [f1:9092, f2:9092]\n", got: brokers, want: []string{"f1:9092", "f2:9092"}},
		{name: "list file as comma string", file: "kafka_brokers: \"f1:9092, f2:9092\"\n", got: brokers, want: []string{"f1:9092", "f2:9092"}},
		{
			name: "list env beats file, spaces trimmed",
			file: "kafka_brokers: [f1:9092]\n", env: map[string]string{"WALBOX_KAFKA_BROKERS": " e1:9092 , e2:9092 ,"},
			got: brokers, want: []string{"e1:9092", "e2:9092"},
		},
		{
			name: "list flag beats env and file",
			args: []string{"--kafka-brokers", "a1:9092"}, env: map[string]string{"WALBOX_KAFKA_BROKERS": "e1:9092"}, file: "kafka_brokers: [f1:9092]\n",
			got: brokers, want: []string{"a1:9092"},
		},
		{
			name: "list repeated flags add up",
			args: []string{"--kafka-brokers", "a1:9092,a2:9092", "--kafka-brokers", "a3:9092"},
			got:  brokers, want: []string{"a1:9092", "a2:9092", "a3:9092"},
		},
		{name: "list IPv6", args: []string{"--kafka-brokers", "[::1]:9092"}, got: brokers, want: []string{"[::1]:9092"}},

		// Sizes.
		{name: "size default", got: inflightBytes, want: int64(8 << 20)},
		{name: "size plain bytes", args: []string{"--max-inflight-bytes", "2000000"}, got: inflightBytes, want: int64(2_000_000)},
		{name: "size MiB", args: []string{"--max-inflight-bytes", "128MiB"}, got: inflightBytes, want: int64(128 << 20)},
		{name: "size GiB with space", env: map[string]string{"WALBOX_MAX_INFLIGHT_BYTES": "1 GiB"}, got: inflightBytes, want: int64(1 << 30)},
		{name: "size MB decimal", file: "max_inflight_bytes: 16MB\n", got: inflightBytes, want: int64(16_000_000)},
		{name: "size unit case-insensitive", args: []string{"--max-inflight-bytes", "4mib"}, got: inflightBytes, want: int64(4 << 20)},
		{name: "size int field KiB", args: []string{"--producer-batch-max-bytes", "512KiB"}, got: func(c Config) any { return c.ProducerBatchMaxBytes }, want: 512 << 10},
		{name: "size int field KB", file: "producer_batch_max_bytes: 900KB\n", got: func(c Config) any { return c.ProducerBatchMaxBytes }, want: 900_000},

		// Columns, a nested YAML section.
		{
			name: "columns from file, one overridden by a flag",
			file: "columns:\n  id: event_id\n  payload: body\n  topic: destination\n", args: []string{"--column-payload", "data"},
			got:  func(c Config) any { return c.Columns },
			want: Columns{ID: "event_id", AggregateType: "aggregate_type", AggregateID: "aggregate_id", EventType: "event_type", Payload: "data", Headers: "headers", Topic: "destination"},
		},
		{name: "column from env", env: map[string]string{"WALBOX_COLUMN_AGGREGATE_ID": "agg"}, got: func(c Config) any { return c.Columns.AggregateID }, want: "agg"},

		// Others.
		{name: "metrics disabled with empty string in file", file: "metrics_addr: \"\"\n", got: func(c Config) any { return c.MetricsAddr }, want: ""},
		{name: "metrics disabled with empty flag", args: []string{"--metrics-addr="}, got: func(c Config) any { return c.MetricsAddr }, want: ""},
		{name: "enum lower-cased", args: []string{"--log-level", "DEBUG"}, got: func(c Config) any { return c.LogLevel }, want: "debug"},
		{
			name: "dead-letter mode with topic",
			args: []string{"--invalid-rows", "dead-letter", "--dead-letter-topic", "outbox.dlq"},
			got:  func(c Config) any { return c.InvalidRows + " " + c.DeadLetterTopic }, want: "dead-letter outbox.dlq",
		},
		{name: "YAML anchors and aliases", file: "slot: &s aliased\npublication: *s\n", got: func(c Config) any { return c.Publication }, want: "aliased"},
		{name: "empty file", file: "# nothing\n", got: slot, want: "walbox"},
		{name: "key=value DSN", args: []string{"--pg-dsn", "host=db user=walbox password='a b' dbname=app"}, got: func(c Config) any { return c.PGDSN }, want: "host=db user=walbox password='a b' dbname=app"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, tt.env, tt.file)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if got := tt.got(c); !equal(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
		})
	}
}

func slot(c Config) any           { return c.Slot }
func statusInterval(c Config) any { return c.StatusInterval }
func brokers(c Config) any        { return c.KafkaBrokers }
func inflightBytes(c Config) any  { return c.MaxInflightBytes }

func equal(a, b any) bool {
	if as, ok := a.([]string); ok {
		bs, ok := b.([]string)
		return ok && slices.Equal(as, bs)
	}
	return a == b
}

func TestLoadConfigFileSource(t *testing.T) {
	dir := t.TempDir()
	fromFlag := filepath.Join(dir, "flag.yaml")
	fromEnv := filepath.Join(dir, "env.yaml")
	for path, s := range map[string]string{fromFlag: "slot: from_flag_file\n", fromEnv: "slot: from_env_file\n"} {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{name: "WALBOX_CONFIG", env: map[string]string{"WALBOX_CONFIG": fromEnv}, want: "from_env_file"},
		{name: "--config beats WALBOX_CONFIG", args: []string{"--config", fromFlag}, env: map[string]string{"WALBOX_CONFIG": fromEnv}, want: "from_flag_file"},
		{name: "empty --config disables WALBOX_CONFIG", args: []string{"--config="}, env: map[string]string{"WALBOX_CONFIG": fromEnv}, want: "walbox"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, tt.env, "")
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if c.Slot != tt.want {
				t.Errorf("Slot = %q, want %q", c.Slot, tt.want)
			}
		})
	}
}

func TestLoadErrors(t *testing.T) {
	const durationMsg = `invalid value "abc" for --status-interval (WALBOX_STATUS_INTERVAL): expected a Go duration such as 1s or 500ms`
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		file    string
		wantErr []string // substrings of the error, in any order
		notErr  []string // substrings that must not appear
	}{
		{name: "malformed duration flag", args: []string{"--status-interval=abc"}, wantErr: []string{durationMsg}},
		{name: "malformed duration env", env: map[string]string{"WALBOX_STATUS_INTERVAL": "abc"}, wantErr: []string{"environment: " + durationMsg}},
		// From the file, the message also names the YAML key.
		{name: "malformed duration YAML", file: "slot: walbox\nstatus_interval: abc\n", wantErr: []string{`walbox.yaml:2: status_interval: invalid value "abc" for --status-interval (WALBOX_STATUS_INTERVAL): expected a Go duration`}},
		{name: "YAML duration without unit", file: "status_interval: 5\n", wantErr: []string{`invalid value "5" for --status-interval`}},
		{
			name: "unknown YAML key names key, line and valid keys",
			file: "slot: walbox\nslot_name: x\n",
			wantErr: []string{
				`walbox.yaml:2: unknown key "slot_name" (did you mean "slot"?); valid keys: cloudevents, cloudevents_source, columns, create_slot, dead_letter_topic,`,
				"status_interval, streaming, table, topic",
			},
		},
		{
			name:    "unknown nested YAML key",
			file:    "columns:\n  id: event_id\n  payload_col: body\n",
			wantErr: []string{`walbox.yaml:3: unknown key "columns.payload_col" (did you mean "columns.payload"?); valid keys under "columns": aggregate_id, aggregate_type, event_type, headers, id, payload, topic`},
		},
		{name: "dotted YAML key", file: "columns.id: x\n", wantErr: []string{`walbox.yaml:1: unknown key "columns.id"`}},
		{name: "YAML section not a mapping", file: "columns: id\n", wantErr: []string{`walbox.yaml:1: "columns" must be a mapping with the keys aggregate_id,`}},
		{name: "YAML list for a single value", file: "slot: [a, b]\n", wantErr: []string{`walbox.yaml:1: slot: invalid value "[...]" for --slot (WALBOX_SLOT): expected a single value, found a list`}},
		{name: "YAML mapping for a list", file: "kafka_brokers: {a: b}\n", wantErr: []string{`walbox.yaml:1: kafka_brokers: invalid value "{...}" for --kafka-brokers (WALBOX_KAFKA_BROKERS): expected a single value, found a mapping`},
			// Reported once: it used to be followed by "missing --kafka-brokers".
			notErr: []string{"missing --kafka-brokers"}},
		{name: "YAML list of lists", file: "kafka_brokers: [[a]]\n", wantErr: []string{`walbox.yaml:1: "kafka_brokers": list items must be single values`}},
		{name: "duplicate YAML key", file: "slot: a\nslot: b\n", wantErr: []string{`walbox.yaml:2: key "slot" is already set on line 1; keep one`}},
		{name: "YAML syntax error", file: "slot: [a\n", wantErr: []string{"is not valid YAML"}},
		{name: "YAML not a mapping", file: "- slot\n", wantErr: []string{"walbox.yaml:1: expected a mapping of settings"}},
		{name: "two YAML documents", file: "slot: a\n---\nslot: b\n", wantErr: []string{"walbox.yaml:2: a second YAML document"}},
		{name: "missing config file names the path", args: []string{"--config", "/nonexistent/walbox.yaml"}, wantErr: []string{`cannot read config file "/nonexistent/walbox.yaml" given by --config: no such file or directory`}},
		{name: "missing config file from env", env: map[string]string{"WALBOX_CONFIG": "/nonexistent/w.yaml"}, wantErr: []string{`"/nonexistent/w.yaml" given by WALBOX_CONFIG`}},
		{name: "unknown flag", args: []string{"--slott", "x"}, wantErr: []string{`unknown option --slott (did you mean --slot?); run "walbox run --help"`}},
		{name: "flag without value", args: []string{"--slot"}, wantErr: []string{"--slot needs a value"}},
		{name: "positional argument", args: []string{"--slot", "a", "extra"}, wantErr: []string{`unexpected argument "extra"`}},
		{name: "malformed size", args: []string{"--max-inflight-bytes", "64MB/s"}, wantErr: []string{`invalid value "64MB/s" for --max-inflight-bytes (WALBOX_MAX_INFLIGHT_BYTES): expected a size in bytes such as 1048576, 64MiB or 1MB`}},
		{name: "fractional size", args: []string{"--max-inflight-bytes", "1.5GiB"}, wantErr: []string{`invalid value "1.5GiB" for --max-inflight-bytes`}},
		{name: "negative size", env: map[string]string{"WALBOX_PRODUCER_BATCH_MAX_BYTES": "-1"}, wantErr: []string{`invalid value "-1" for --producer-batch-max-bytes`}},
		{name: "overflowing size", args: []string{"--max-inflight-bytes", "99999999999GiB"}, wantErr: []string{`invalid value "99999999999GiB" for --max-inflight-bytes`}},
		{name: "malformed integer", args: []string{"--dedup-window", "lots"}, wantErr: []string{`invalid value "lots" for --dedup-window (WALBOX_DEDUP_WINDOW): expected a whole number such as 10000`}},
		{name: "validation error after loading", args: []string{"--slot", "Bad"}, wantErr: []string{`invalid value "Bad" for --slot (WALBOX_SLOT)`}},
		{
			name:    "all problems at once",
			args:    []string{"--status-interval=abc", "--slot", "Bad", "--topic", "x.{"},
			file:    "unknown: 1\n",
			wantErr: []string{durationMsg, "--slot (WALBOX_SLOT)", "--topic (WALBOX_TOPIC)", `unknown key "unknown"`},
		},
		{
			name:    "required options missing",
			env:     map[string]string{"WALBOX_PG_DSN": "", "WALBOX_KAFKA_BROKERS": ""},
			wantErr: []string{"missing --pg-dsn (WALBOX_PG_DSN)", "missing --kafka-brokers (WALBOX_KAFKA_BROKERS)"},
		},
		{
			name:    "DSN password not echoed",
			args:    []string{"--pg-dsn", "postgres://walbox:Sup3rS3cret@db:99999/app"},
			wantErr: []string{`invalid value "postgres://walbox:xxxxx@db:99999/app" for --pg-dsn (WALBOX_PG_DSN)`, "invalid port"},
			notErr:  []string{"Sup3rS3cret"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := load(t, tt.args, tt.env, tt.file)
			if err == nil {
				t.Fatalf("Load succeeded, want an error containing %q", tt.wantErr)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error does not wrap ErrInvalid: %v", err)
			}
			for _, want := range tt.wantErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error does not contain %q:\n%v", want, err)
				}
			}
			for _, not := range tt.notErr {
				if strings.Contains(err.Error(), not) {
					t.Errorf("error contains %q:\n%v", not, err)
				}
			}
		})
	}
}

func TestLoadBadValueReportedOnce(t *testing.T) {
	// The file sets shutdown_timeout to 0s, which parses but is out of range;
	// the flag's "x" does not parse, so the field keeps 0s. The user must
	// hear about "x" only, not also about a 0s they are replacing.
	_, err := load(t, []string{"--shutdown-timeout", "x"}, nil, "shutdown_timeout: 0s\n")
	if err == nil {
		t.Fatal("Load succeeded")
	}
	if n := strings.Count(err.Error(), "--shutdown-timeout"); n != 1 {
		t.Errorf("--shutdown-timeout reported %d times, want once:\n%v", n, err)
	}
}

func TestLoadMissingFileWrapsNotExist(t *testing.T) {
	_, err := load(t, []string{"--config", filepath.Join(t.TempDir(), "absent.yaml")}, nil, "")
	if !errors.Is(err, fs.ErrNotExist) || !errors.Is(err, ErrInvalid) {
		t.Errorf("error = %v, want one wrapping fs.ErrNotExist and ErrInvalid", err)
	}
}

func TestLoadOptionErrorFields(t *testing.T) {
	_, err := load(t, nil, map[string]string{"WALBOX_STATUS_INTERVAL": "abc"}, "")
	var oe *OptionError
	if !errors.As(err, &oe) {
		t.Fatalf("error %v is not an *OptionError", err)
	}
	want := OptionError{Flag: "status-interval", Env: "WALBOX_STATUS_INTERVAL", Value: "abc", Reason: expectDuration, Where: "environment"}
	if *oe != want {
		t.Errorf("OptionError = %+v, want %+v", *oe, want)
	}
}

func TestLoadHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help", "-help"} {
		t.Run(arg, func(t *testing.T) {
			var out strings.Builder
			_, err := Load([]string{"--slot", "x", arg}, func(string) string { return "" }, &out)
			if !errors.Is(err, flag.ErrHelp) {
				t.Fatalf("error = %v, want flag.ErrHelp", err)
			}
			var usage strings.Builder
			Usage(&usage)
			if out.String() != usage.String() {
				t.Errorf("help output differs from Usage:\n%s", out.String())
			}
		})
	}
}

func TestLoadExampleFile(t *testing.T) {
	c, err := Load([]string{"--config", "example.yaml"}, func(string) string { return "" }, &strings.Builder{})
	if err != nil {
		t.Fatalf("Load(example.yaml): %v", err)
	}
	// Every value in the example is the default, except the two required ones.
	want := Defaults()
	want.PGDSN = "postgres://walbox:secret@localhost:5432/app?sslmode=disable"
	want.KafkaBrokers = []string{"localhost:9092"}
	if c.PGDSN != want.PGDSN || !slices.Equal(c.KafkaBrokers, want.KafkaBrokers) {
		t.Errorf("required values = %q %q", c.PGDSN, c.KafkaBrokers)
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("example.yaml differs from the defaults:\n got %+v\nwant %+v", c, want)
	}
}

func TestExampleFileHasEveryKey(t *testing.T) {
	data, err := os.ReadFile("example.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := string(data)
	for _, o := range options {
		if o.yaml == "" {
			continue
		}
		parts := strings.Split(o.yaml, ".")
		key := parts[len(parts)-1] + ":"
		if !strings.Contains(text, "\n"+strings.Repeat("  ", len(parts)-1)+key) {
			t.Errorf("example.yaml has no key %q", o.yaml)
		}
	}
}
