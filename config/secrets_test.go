package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretsNeverShown: the SASL password and the DSN password, given as
// flags, environment or file, appear in no error, no help text and not in
// the Redacted config walbox logs at start.
func TestSecretsNeverShown(t *testing.T) {
	const saslSecret, pgSecret = "sasl-Secret-93kd", "pg-Secret-71qa"
	dsn := "postgres://walbox:" + pgSecret + "@localhost/db?sslmode=disable"
	dir := t.TempDir()
	passFile := filepath.Join(dir, "pass")
	if err := os.WriteFile(passFile, []byte(saslSecret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	yamlFile := filepath.Join(dir, "walbox.yaml")
	if err := os.WriteFile(yamlFile, []byte("kafka_sasl_password: "+saslSecret+"\nkafka_sasl_mechanism: SCRAM-SHA-512\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := func(kv ...string) func(string) string {
		m := map[string]string{}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return func(k string) string { return m[k] }
	}
	for _, tc := range []struct {
		name   string
		args   []string
		getenv func(string) string
		ok     bool
	}{
		{"flags, valid", []string{"--pg-dsn", dsn, "--kafka-brokers", "k:9092", "--kafka-sasl-mechanism", "scram-sha-512", "--kafka-sasl-username", "walbox", "--kafka-sasl-password", saslSecret}, nil, true},
		{"password file, valid", []string{"--pg-dsn", dsn, "--kafka-brokers", "k:9092", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "walbox", "--kafka-sasl-password-file", passFile}, nil, true},
		{"flags, other option bad", []string{"--pg-dsn", dsn, "--kafka-brokers", "k:9092", "--status-interval", "bogus", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-username", "walbox", "--kafka-sasl-password", saslSecret}, nil, false},
		{"password without user", []string{"--pg-dsn", dsn, "--kafka-brokers", "k:9092", "--kafka-sasl-mechanism", "PLAIN", "--kafka-sasl-password", saslSecret}, nil, false},
		{"unknown mechanism", nil, env("WALBOX_PG_DSN", dsn, "WALBOX_KAFKA_BROKERS", "k:9092", "WALBOX_KAFKA_SASL_MECHANISM", "GSSAPI", "WALBOX_KAFKA_SASL_PASSWORD", saslSecret), false},
		{"environment, brokers missing", nil, env("WALBOX_PG_DSN", dsn, "WALBOX_KAFKA_SASL_MECHANISM", "PLAIN", "WALBOX_KAFKA_SASL_USERNAME", "u", "WALBOX_KAFKA_SASL_PASSWORD", saslSecret), false},
		{"file, user missing", []string{"--config", yamlFile, "--pg-dsn", dsn, "--kafka-brokers", "k:9092"}, nil, false},
		{"help with secrets set", []string{"--help"}, env("WALBOX_KAFKA_SASL_PASSWORD", saslSecret, "WALBOX_PG_DSN", dsn), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c, err := Load(tc.args, tc.getenv, &out)
			if tc.ok != (err == nil) {
				t.Fatalf("Load: %v; want ok=%v", err, tc.ok)
			}
			shown := out.String()
			if err != nil {
				shown += err.Error()
				if !errors.Is(err, flag.ErrHelp) && !errors.Is(err, ErrInvalid) {
					t.Errorf("error %v is not ErrInvalid", err)
				}
			} else {
				shown += fmt.Sprintf("%+v %v", c.Redacted(), c.Redacted())
				if c.KafkaSecurity.SASLPasswordFile == "" && c.KafkaSecurity.SASLPassword != saslSecret {
					t.Errorf("the password was not loaded: %q", c.KafkaSecurity.SASLPassword)
				}
			}
			for _, s := range []string{saslSecret, pgSecret} {
				if strings.Contains(shown, s) {
					t.Errorf("a secret is shown:\n%s", shown)
				}
			}
		})
	}
}

func TestKafkaTLSOptionErrors(t *testing.T) {
	base := []string{"--pg-dsn", "host=localhost", "--kafka-brokers", "k:9092"}
	notPEM := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--kafka-tls-ca-file", "/nonexistent/ca.pem"}, `invalid value "/nonexistent/ca.pem" for --kafka-tls-ca-file (WALBOX_KAFKA_TLS_CA_FILE): cannot read CA file`},
		{[]string{"--kafka-tls-ca-file", notPEM}, "--kafka-tls-ca-file (WALBOX_KAFKA_TLS_CA_FILE): CA file"},
		{[]string{"--kafka-tls-cert-file", notPEM}, "--kafka-tls-cert-file (WALBOX_KAFKA_TLS_CERT_FILE): mutual TLS needs the key too; set --kafka-tls-key-file"},
		{[]string{"--kafka-tls-key-file", notPEM}, "--kafka-tls-key-file (WALBOX_KAFKA_TLS_KEY_FILE): mutual TLS needs the certificate too"},
		{[]string{"--kafka-tls-cert-file", notPEM, "--kafka-tls-key-file", notPEM}, "cannot load the key pair"},
		{[]string{"--kafka-sasl-password-file", "/nonexistent/pass"}, "--kafka-sasl-password-file (WALBOX_KAFKA_SASL_PASSWORD_FILE): cannot read"},
		{[]string{"--kafka-sasl-mechanism", "scram-sha-1"}, `--kafka-sasl-mechanism "SCRAM-SHA-1" is not supported; use one of PLAIN`},
	} {
		_, err := Load(append(base, tc.args...), nil, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want it to contain %q", tc.args, err, tc.want)
		}
	}
	c, err := Load(append(base, "--kafka-tls-server-name", "kafka.internal"), nil, &bytes.Buffer{})
	if err != nil || !c.KafkaSecurity.TLSEnabled() {
		t.Errorf("--kafka-tls-server-name alone: %v, TLS on %v; want TLS on", err, c.KafkaSecurity.TLSEnabled())
	}
}
