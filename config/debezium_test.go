package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/slotctl"
)

const testConnector = `name=outbox-connector
connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=db
database.port=5433
database.user=dbz
database.password=pa55-word-xyz
database.dbname=app
topic.prefix=app
plugin.name=pgoutput
slot.name=dbz_slot
table.include.list=public.outbox,billing.outbox
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
producer.override.linger.ms=25
tasks.max=1
`

const testWorker = "bootstrap.servers=k1:9092,k2:9092\n"

func writeDebezium(t *testing.T, connector, worker string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	c, w := filepath.Join(dir, "connector.properties"), filepath.Join(dir, "worker.properties")
	if err := os.WriteFile(c, []byte(connector), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(w, []byte(worker), 0o600); err != nil {
		t.Fatal(err)
	}
	return c, w
}

func TestDebeziumConfig(t *testing.T) {
	c, w := writeDebezium(t, testConnector, testWorker)
	env := map[string]string{"WALBOX_DEBEZIUM_CONFIG": c, "WALBOX_DEBEZIUM_WORKER_CONFIG": w}
	cfg, err := Load([]string{"--slot", "explicit_slot"}, func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.PGDSN != "host=db port=5433 user=dbz password=pa55-word-xyz dbname=app" ||
		cfg.Table != "public.outbox,billing.outbox" || cfg.Publication != debezium.DefaultPublication ||
		strings.Join(cfg.KafkaBrokers, ",") != "k1:9092,k2:9092" || cfg.ProducerLinger.String() != "25ms" {
		t.Errorf("config = %+v", cfg.Redacted())
	}
	// The explicit flag wins, and the override is reported.
	if cfg.Slot != "explicit_slot" {
		t.Errorf("slot = %q, want the flag's", cfg.Slot)
	}
	tr, err := cfg.DebeziumTranslation()
	if err != nil {
		t.Fatal(err)
	}
	ov := cfg.DebeziumOverrides(tr)
	if len(ov) != 1 || !strings.Contains(ov[0], "--slot explicit_slot") || !strings.Contains(ov[0], "slot.name=dbz_slot") {
		t.Errorf("overrides = %q", ov)
	}
	// The pipeline routes both tables.
	if p := cfg.PipelineConfig(); strings.Join(p.Tables, ",") != "public.outbox,billing.outbox" {
		t.Errorf("pipeline tables = %v", p.Tables)
	}
	var s slotctl.Config
	DebeziumSlotPolicy(tr, &s)
	if !s.OtherTablesOK || s.NoCreatePublication { // all_tables, Debezium's default
		t.Errorf("slot policy = %+v", s)
	}

	// config check shows where each value came from, secrets redacted.
	settings, _, err := Command{Name: "walbox config check"}.Sources(nil, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range settings {
		if strings.Contains(st.Value, "pa55-word-xyz") {
			t.Errorf("--%s shows the password", st.Flag)
		}
		if st.Flag == "pg-dsn" && !strings.Contains(st.Source, "debezium "+c+" (database.*)") {
			t.Errorf("--pg-dsn source %q", st.Source)
		}
	}
}

func TestDebeziumConfigProblems(t *testing.T) {
	bad := strings.Replace(testConnector, "plugin.name=pgoutput", "plugin.name=decoderbufs", 1) + "snapshot.mode=always\n"
	c, w := writeDebezium(t, bad, testWorker)
	_, err := Load([]string{"--debezium-config", c, "--debezium-worker-config", w, "--topic", "x"}, nil, nil)
	if !errors.Is(err, ErrInvalid) || !errors.Is(err, debezium.ErrUnsupported) {
		t.Fatalf("err = %v", err)
	}
	for _, s := range []string{"plugin.name=decoderbufs", "snapshot.mode=always", "--topic (flag) does not apply with --debezium-config"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
	if strings.Contains(err.Error(), "pa55-word-xyz") {
		t.Errorf("error shows the password")
	}
	_, err = Load([]string{"--debezium-worker-config", w, "--pg-dsn", "postgres://x@db/app", "--kafka-brokers", "k:9092"}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "only with --debezium-config") {
		t.Errorf("worker alone: %v", err)
	}
	_, err = Load([]string{"--debezium-config", filepath.Join(t.TempDir(), "nope")}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "--debezium-config") {
		t.Errorf("missing file: %v", err)
	}
}

func TestSeveralTablesRefuseSnapshot(t *testing.T) {
	_, err := Load([]string{"--pg-dsn", "postgres://x@db/app", "--kafka-brokers", "k:9092", "--table", "a.o,b.o", "--snapshot", "all"}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "reads one outbox table") {
		t.Errorf("err = %v", err)
	}
}

// An explicit SASL password overriding the one of the Debezium JAAS
// config was compared after redaction ("xxxxx" = "xxxxx"), so the
// override was never reported.
func TestDebeziumOverrideSecret(t *testing.T) {
	c, w := writeDebezium(t, testConnector, testWorker+`producer.security.protocol=SASL_SSL
producer.sasl.mechanism=PLAIN
producer.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="dbz" password="dbz-kafka-secret";
`)
	env := map[string]string{"WALBOX_DEBEZIUM_CONFIG": c, "WALBOX_DEBEZIUM_WORKER_CONFIG": w, "WALBOX_KAFKA_SASL_PASSWORD": "walbox-own-secret"}
	cfg, err := Load(nil, func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.KafkaSecurity.SASLPassword != "walbox-own-secret" {
		t.Fatalf("password not the explicit one")
	}
	tr, err := cfg.DebeziumTranslation()
	if err != nil {
		t.Fatal(err)
	}
	ov := strings.Join(cfg.DebeziumOverrides(tr), "\n")
	if !strings.Contains(ov, "--kafka-sasl-password") {
		t.Errorf("the password override is not reported: %q", ov)
	}
	if strings.Contains(ov, "secret") {
		t.Errorf("an override shows a password: %q", ov)
	}
}
