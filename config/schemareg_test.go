package config

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbox/walbox/schemareg"
)

// TestValueFormatOptions: each registry option is accepted only where it
// does something, and each problem lands on the option that causes it.
func TestValueFormatOptions(t *testing.T) {
	dir := t.TempDir()
	pass := filepath.Join(dir, "pass")
	if err := os.WriteFile(pass, []byte("pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	reg := []string{"--value-format", "avro", "--schema-registry-url", "http://registry:8081"}
	tests := []struct {
		name string
		args []string
		want string // "" valid
	}{
		{name: "json, the default", args: nil},
		{name: "avro", args: reg},
		{name: "AVRO in upper case", args: []string{"--value-format", "AVRO", "--schema-registry-url", "https://r"}},
		{name: "basic auth from a file", args: append(reg, "--schema-registry-user", "u", "--schema-registry-password-file", pass)},
		{name: "record strategy", args: append(reg, "--value-subject-strategy", "record", "--value-record-name", "shop.Order")},
		{name: "pinned version", args: append(reg, "--value-schema-version", "3")},
		{name: "protobuf message", args: []string{"--value-format", "protobuf", "--schema-registry-url", "http://r", "--value-protobuf-message", "shop.Order"}},

		{name: "unknown format", args: []string{"--value-format", "xml"},
			want: `--value-format (WALBOX_VALUE_FORMAT): expected one of json, avro, protobuf, json-schema, pre-encoded`},
		{name: "pre-encoded", args: []string{"--value-format", "pre-encoded", "--schema-registry-url", "http://r"}},
		{name: "pre-encoded with a version", args: []string{"--value-format", "pre-encoded", "--schema-registry-url", "http://r", "--value-schema-version", "2"},
			want: "pre-encoded payloads pass through with the schema id they carry"},
		{name: "avro without a registry", args: []string{"--value-format", "avro"},
			want: "avro needs the registry; set --schema-registry-url"},
		{name: "registry with json", args: []string{"--schema-registry-url", "http://r"},
			want: `--schema-registry-url (WALBOX_SCHEMA_REGISTRY_URL): set, but --value-format is "json" and --key-format "text", which use no registry`},
		{name: "avro keys", args: []string{"--key-format", "avro", "--schema-registry-url", "http://r"}},
		{name: "protobuf keys", args: []string{"--key-format", "protobuf", "--schema-registry-url", "http://r"},
			want: "--key-format (WALBOX_KEY_FORMAT): expected one of text, avro, json-schema"},
		{name: "keys without a registry", args: []string{"--key-format", "json-schema"},
			want: "json-schema needs the registry; set --schema-registry-url"},
		{name: "not a URL", args: []string{"--value-format", "avro", "--schema-registry-url", "registry:8081"},
			want: `registry URL "registry:8081" is not an http:// or https:// URL`},
		{name: "user without password", args: append(reg, "--schema-registry-user", "u"),
			want: "--schema-registry-user (WALBOX_SCHEMA_REGISTRY_USER): a user without a password"},
		{name: "password without user", args: append(reg, "--schema-registry-password", "pw"),
			want: "--schema-registry-password (WALBOX_SCHEMA_REGISTRY_PASSWORD): a password without a user"},
		{name: "password file unreadable", args: append(reg, "--schema-registry-user", "u", "--schema-registry-password-file", "/nonexistent/p"),
			want: "--schema-registry-password-file (WALBOX_SCHEMA_REGISTRY_PASSWORD_FILE): cannot read"},
		{name: "basic and bearer", args: append(reg, "--schema-registry-user", "u", "--schema-registry-password", "p", "--schema-registry-bearer-token", "t"),
			want: "basic authentication and a bearer token together"},
		{name: "cert without key", args: append(reg, "--schema-registry-tls-cert-file", pass),
			want: "--schema-registry-tls-cert-file (WALBOX_SCHEMA_REGISTRY_TLS_CERT_FILE): mutual TLS needs the key too"},
		{name: "CA not PEM", args: append(reg, "--schema-registry-tls-ca-file", pass),
			want: "--schema-registry-tls-ca-file (WALBOX_SCHEMA_REGISTRY_TLS_CA_FILE): CA file"},
		{name: "record strategy without name", args: append(reg, "--value-subject-strategy", "record"),
			want: "--value-record-name (WALBOX_VALUE_RECORD_NAME)"},
		{name: "record name with the topic strategy", args: append(reg, "--value-record-name", "shop.Order"),
			want: "set, but --value-subject-strategy is topic"},
		{name: "unknown strategy", args: append(reg, "--value-subject-strategy", "mine"),
			want: "--value-subject-strategy (WALBOX_VALUE_SUBJECT_STRATEGY): expected one of topic, record, topic-record"},
		{name: "version and id", args: append(reg, "--value-schema-version", "2", "--value-schema-id", "5"),
			want: "set together with --value-schema-id; pin one of them"},
		{name: "message with avro", args: append(reg, "--value-protobuf-message", "shop.Order"),
			want: `--value-protobuf-message (WALBOX_VALUE_PROTOBUF_MESSAGE): set, but --value-format is "avro"`},
		// In Debezium mode the converters decide the format.
		{name: "with Debezium mode", args: append(reg, "--debezium-config", pass),
			want: "--value-format (flag) does not apply with --debezium-config: value.converter of"},
		{name: "inferred", args: append(reg, "--value-schema-source", "inferred")},
		{name: "inferred with protobuf", args: []string{"--value-format", "protobuf", "--schema-registry-url", "http://r", "--value-schema-source", "inferred"},
			want: "--value-schema-source (WALBOX_VALUE_SCHEMA_SOURCE): inferred schemas are Avro"},
		{name: "inferred with a version", args: append(reg, "--value-schema-source", "inferred", "--value-schema-version", "2"),
			want: "--value-schema-source (WALBOX_VALUE_SCHEMA_SOURCE): an inferred schema is registered under <topic>-value"},
		{name: "unknown source", args: append(reg, "--value-schema-source", "guessed"),
			want: "--value-schema-source (WALBOX_VALUE_SCHEMA_SOURCE): expected one of registered, inferred"},
		{name: "latest ttl", args: append(reg, "--schema-latest-ttl", "1m")},
		{name: "latest ttl pinned", args: append(reg, "--schema-latest-ttl", "1m", "--value-schema-version", "2"),
			want: "--schema-latest-ttl (WALBOX_SCHEMA_LATEST_TTL): set with --value-schema-version"},
		{name: "latest ttl negative", args: append(reg, "--schema-latest-ttl", "-1s"),
			want: "--schema-latest-ttl (WALBOX_SCHEMA_LATEST_TTL): expected a positive duration"},
		{name: "cache size zero", args: append(reg, "--schema-cache-size", "0"),
			want: "--schema-cache-size (WALBOX_SCHEMA_CACHE_SIZE)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, nil, "")
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.EncodesKeys() {
					if err := c.KeyEncoderConfig().Validate(); err != nil {
						t.Errorf("schemareg refuses the key config config accepted: %v", err)
					}
				}
				if c.encodesValues() {
					if err := c.ValueEncoderConfig().Validate(); err != nil {
						t.Errorf("schemareg refuses what config accepted: %v", err)
					}
					if err := c.SchemaRegistry.Validate(); err != nil {
						t.Errorf("schemareg refuses the client config config accepted: %v", err)
					}
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestValueEncoderConfig(t *testing.T) {
	c, err := load(t, []string{"--value-format", "json-schema", "--schema-registry-url", "http://a,http://b",
		"--value-subject-strategy", "topic-record", "--value-record-name", "shop.Order", "--value-schema-id", "9"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	got := c.ValueEncoderConfig()
	want := schemareg.Config{Format: schemareg.FormatJSONSchema, Strategy: schemareg.TopicRecordName, RecordName: "shop.Order",
		ID: 9, CacheSize: schemareg.DefaultCacheSize}
	if got != want {
		t.Errorf("ValueEncoderConfig = %+v, want %+v", got, want)
	}
	if len(c.SchemaRegistry.URLs) != 2 || c.SchemaRegistry.RetryBudget != schemareg.DefaultRetryBudget ||
		c.SchemaRegistry.RequestTimeout != schemareg.DefaultRequestTimeout {
		t.Errorf("SchemaRegistry = %+v", c.SchemaRegistry)
	}
	if d := Defaults(); d.UsesSchemaRegistry() {
		t.Error("the defaults use the registry")
	}
}

// TestRegistrySecretsNeverShown: the registry's password and token, from
// flags, environment or file, appear in no error and not in Redacted.
func TestRegistrySecretsNeverShown(t *testing.T) {
	const pw, tok = "reg-Secret-55xz", "tok-Secret-19qp"
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		file string
		ok   bool
	}{
		{name: "password flag", ok: true, args: []string{"--value-format", "avro", "--schema-registry-url", "http://r", "--schema-registry-user", "u", "--schema-registry-password", pw}},
		{name: "token from the environment", ok: true, env: map[string]string{"WALBOX_VALUE_FORMAT": "avro", "WALBOX_SCHEMA_REGISTRY_URL": "http://r", "WALBOX_SCHEMA_REGISTRY_BEARER_TOKEN": tok}},
		{name: "password in the file", ok: true, file: "value_format: avro\nschema_registry_url: [http://r]\nschema_registry_user: u\nschema_registry_password: " + pw + "\n"},
		{name: "password without user", args: []string{"--value-format", "avro", "--schema-registry-url", "http://r", "--schema-registry-password", pw}},
		{name: "token with json", args: []string{"--schema-registry-bearer-token", tok}},
		{name: "both", args: []string{"--value-format", "avro", "--schema-registry-url", "http://r", "--schema-registry-user", "u", "--schema-registry-password", pw, "--schema-registry-bearer-token", tok}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := load(t, tc.args, tc.env, tc.file)
			if tc.ok != (err == nil) {
				t.Fatalf("Load: %v, want ok=%v", err, tc.ok)
			}
			var shown bytes.Buffer
			if err != nil {
				shown.WriteString(err.Error())
			} else {
				fmt.Fprintf(&shown, "%+v %v", c.Redacted(), c.Redacted())
				if c.SchemaRegistry.BasicAuthPassword != pw && c.SchemaRegistry.BearerToken != tok {
					t.Errorf("no secret was loaded: %+v", c.SchemaRegistry)
				}
			}
			for _, s := range []string{pw, tok} {
				if strings.Contains(shown.String(), s) {
					t.Errorf("a secret is shown:\n%s", shown.String())
				}
			}
		})
	}
}

// TestInferredEncoderConfig: the inferred source names its records after
// the payload column, as Debezium names them after table.field.event.payload.
func TestInferredEncoderConfig(t *testing.T) {
	c, err := load(t, []string{"--value-format", "avro", "--schema-registry-url", "http://a",
		"--value-schema-source", "inferred", "--column-payload", "body"}, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	got := c.ValueEncoderConfig()
	want := schemareg.Config{Format: schemareg.FormatAvro, Strategy: schemareg.TopicName, CacheSize: schemareg.DefaultCacheSize,
		Source: schemareg.Inferred, PayloadColumn: "body"}
	if got != want {
		t.Errorf("ValueEncoderConfig = %+v, want %+v", got, want)
	}
}
