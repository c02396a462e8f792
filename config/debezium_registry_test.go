package config

import (
	"strings"
	"testing"
)

// TestDebeziumRegistryConverters: a connector file's registry converter
// sets the registry options (the password masked where shown); with
// auto-registration and the expanded payload, the inferred mode; an
// explicit --value-format with a converter that uses no registry is
// refused; --cloudevents does not apply in Debezium mode.
func TestDebeziumRegistryConverters(t *testing.T) {
	avro := strings.Replace(testConnector, "value.converter=org.apache.kafka.connect.storage.StringConverter\n",
		"value.converter=io.confluent.connect.avro.AvroConverter\n"+
			"value.converter.schema.registry.url=http://registry:8081\n"+
			"value.converter.basic.auth.credentials.source=USER_INFO\n"+
			"value.converter.basic.auth.user.info=fred:reg-s3cret\n"+
			"value.converter.auto.register.schemas=false\n"+
			"value.converter.use.latest.version=true\n"+
			"value.converter.latest.cache.ttl.sec=300\n", 1)
	c, w := writeDebezium(t, avro, testWorker)
	cfg, err := Load([]string{"--debezium-config", c, "--debezium-worker-config", w}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.ValueFormat != "avro" || strings.Join(cfg.SchemaRegistry.URLs, ",") != "http://registry:8081" ||
		cfg.SchemaRegistry.BasicAuthUser != "fred" || cfg.SchemaRegistry.BasicAuthPassword != "reg-s3cret" || cfg.ValueSchema.LatestTTL.String() != "5m0s" {
		t.Errorf("config = %+v", cfg.Redacted())
	}
	if shown := (&cfg).Redacted(); strings.Contains(shown.SchemaRegistry.BasicAuthPassword, "s3cret") {
		t.Errorf("password shown: %+v", shown.SchemaRegistry)
	}

	inferred := strings.Replace(avro, "value.converter.auto.register.schemas=false\n", "value.converter.auto.register.schemas=true\ntransforms.outbox.table.expand.json.payload=true\n", 1)
	c, w = writeDebezium(t, inferred, testWorker)
	cfg, err = Load([]string{"--debezium-config", c, "--debezium-worker-config", w}, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatalf("inferred: %v", err)
	}
	if cfg.ValueFormat != "avro" || cfg.ValueSchema.Source != "inferred" {
		t.Errorf("auto.register.schemas=true with table.expand.json.payload: --value-format %q, --value-schema-source %q; want avro, inferred", cfg.ValueFormat, cfg.ValueSchema.Source)
	}

	c, w = writeDebezium(t, testConnector, testWorker)
	for _, args := range [][]string{
		{"--value-format", "avro", "--schema-registry-url", "http://r:8081"},
		{"--cloudevents", "binary"},
	} {
		_, err = Load(append([]string{"--debezium-config", c, "--debezium-worker-config", w}, args...), func(string) string { return "" }, nil)
		if err == nil || !strings.Contains(err.Error(), args[0]+" (flag) does not apply with --debezium-config") {
			t.Errorf("%v with a StringConverter file: %v", args, err)
		}
	}
}
