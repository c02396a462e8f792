package debezium

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/walbox/walbox/debezium/eventrouter"
)

// base is a minimal supported connector configuration.
const base = `name=outbox-connector
connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=localhost
database.user=dbz
database.dbname=app
topic.prefix=app
plugin.name=pgoutput
table.include.list=public.outbox
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
`

func translate(t *testing.T, connector, worker string) (*Translation, error) {
	t.Helper()
	c, err := Parse("connector.properties", []byte(connector))
	if err != nil {
		t.Fatal(err)
	}
	var w *Properties
	if worker != "" {
		if w, err = Parse("worker.properties", []byte(worker)); err != nil {
			t.Fatal(err)
		}
	}
	return Translate(c, w)
}

func TestTranslateTestdata(t *testing.T) {
	c, err := ReadFile("testdata/outbox-connector.properties")
	if err != nil {
		t.Fatal(err)
	}
	w, err := ReadFile("testdata/worker.properties")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Translate(c, w)
	if err != nil {
		t.Fatal(err)
	}
	wantOpts := map[string]string{
		"pg-dsn":               "host=db.example.com port=5432 user=debezium password='s3cr3t pass' dbname=orders sslmode=verify-full sslrootcert=/etc/ssl/pg-ca.pem",
		"slot":                 "outbox_slot",
		"publication":          "outbox_pub",
		"table":                "public.outbox,inventory.outbox",
		"kafka-brokers":        "kafka1:9092,kafka2:9092",
		"producer-linger":      "20ms", // the connector's override wins over the worker's 5
		"kafka-tls":            "true",
		"kafka-sasl-mechanism": "SCRAM-SHA-512",
		"kafka-sasl-username":  "walbox",
		"kafka-tls-ca-file":    "/etc/kafka/ca.pem",
	}
	for flag, want := range wantOpts {
		if got, _ := tr.Option(flag); got != want {
			t.Errorf("--%s = %q, want %q", flag, got, want)
		}
	}
	r := tr.Router
	if !reflect.DeepEqual(r.Tables, []string{"public.outbox", "inventory.outbox"}) || r.EventKeyColumn != "aggregate_id" ||
		r.RouteByColumn != "aggregate_type" || r.TopicReplacement != "${routedByValue}.events" || !r.ExpandJSONPayload ||
		r.ConnectorName != "outbox-connector" || r.LogicalName != "dbserver1" || !r.ExtendedHeaders {
		t.Errorf("router = %+v", r)
	}
	wantPlacement := []eventrouter.Placement{{Column: "type", Location: "header", Alias: "eventType"}, {Column: "tenant", Location: "envelope"}}
	if !reflect.DeepEqual(r.AdditionalPlacement, wantPlacement) {
		t.Errorf("placement = %+v", r.AdditionalPlacement)
	}
	if r.KeyConverter != (eventrouter.ConverterConfig{Kind: eventrouter.StringConverter}) ||
		r.ValueConverter != (eventrouter.ConverterConfig{Kind: eventrouter.JSONConverter, SchemasEnable: false}) {
		t.Errorf("converters = %+v %+v", r.KeyConverter, r.ValueConverter)
	}
	if tr.AutocreateMode != AutocreateFiltered || tr.OffsetsFile != "/var/lib/connect/offsets" {
		t.Errorf("mode %q offsets %q", tr.AutocreateMode, tr.OffsetsFile)
	}
	// Every key of both files appears in the mappings, secrets redacted.
	seen := map[string]bool{}
	for _, m := range tr.Mappings {
		seen[m.Where] = true
		if strings.Contains(m.Value, "s3cr3t") || strings.Contains(m.Value, "password=") {
			t.Errorf("mapping %+v shows a secret", m)
		}
	}
	for _, p := range []*Properties{c, w} {
		for _, e := range p.Entries() {
			if !seen[p.Where(e.Key)] {
				t.Errorf("key %s (%s) is not in the mappings", e.Key, p.Where(e.Key))
			}
		}
	}
	// Warnings, not errors, for what has no effect.
	var warned []string
	for _, w := range tr.Warnings {
		warned = append(warned, w.Key)
	}
	for _, k := range []string{"tasks.max", "producer.compression.type", "plugin.path", "offset.flush.interval.ms"} {
		if !strings.Contains(strings.Join(warned, " "), k) {
			t.Errorf("no warning for %s (warnings: %v)", k, warned)
		}
	}
}

func TestTranslateUnsupportedAllAtOnce(t *testing.T) {
	conf := strings.NewReplacer("plugin.name=pgoutput", "plugin.name=decoderbufs",
		"table.include.list=public.outbox", "table.include.list=public.outbox_.*,public.outbox").Replace(base) +
		"slot.drop.on.stop=true\n" +
		"transforms.outbox.route.topic.regex.case.insensitive=true\n" +
		"provide.transaction.metadata=true\n" +
		"some.unknown.key=1\n" +
		"producer.override.partitioner.class=x.Y\n" +
		"database.initial.statements=SET x=1\n"
	_, err := translate(t, conf, "")
	var ue *UnsupportedError
	if !errors.As(err, &ue) || !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want *UnsupportedError", err)
	}
	var keys []string
	for _, p := range ue.Problems {
		keys = append(keys, p.Key)
		if p.Why == "" || p.Fix == "" {
			t.Errorf("problem %+v lacks why or fix", p)
		}
	}
	want := []string{"plugin.name", "table.include.list", "slot.drop.on.stop",
		"transforms.outbox.route.topic.regex.case.insensitive", "provide.transaction.metadata", "some.unknown.key",
		"producer.override.partitioner.class", "database.initial.statements"}
	for _, k := range want {
		if !strings.Contains(strings.Join(keys, " "), k) {
			t.Errorf("no problem for %s; got %v", k, keys)
		}
	}
	msg := err.Error()
	for _, s := range []string{`"public.outbox_.*" is not a plain schema.table name`, "walbox streams only pgoutput, not decoderbufs", "connector.properties:"} {
		if !strings.Contains(msg, s) {
			t.Errorf("message lacks %q:\n%s", s, msg)
		}
	}
}

func TestTranslateConfigProvider(t *testing.T) {
	_, err := translate(t, base+"database.password=${file:/run/secrets/pg.properties:password}\n", "")
	if err == nil || !strings.Contains(err.Error(), "config provider") || strings.Contains(err.Error(), "/run/secrets") {
		t.Errorf("err = %v", err)
	}
	// ${routedByValue} is the EventRouter's own placeholder, not a provider.
	if _, err := translate(t, base+"transforms.outbox.route.topic.replacement=events.${routedByValue}\n", ""); err != nil {
		t.Errorf("routedByValue: %v", err)
	}
}

func TestTranslateMissing(t *testing.T) {
	_, err := translate(t, "connector.class=io.debezium.connector.postgresql.PostgresConnector\n", "")
	var ue *UnsupportedError
	if !errors.As(err, &ue) {
		t.Fatal(err)
	}
	msg := err.Error()
	for _, k := range []string{"database.hostname", "database.user", "database.dbname", "topic.prefix", "plugin.name", "table.include.list", "transforms"} {
		if !strings.Contains(msg, k+": missing") {
			t.Errorf("message lacks %s missing:\n%s", k, msg)
		}
	}
}

func TestTranslateTables(t *testing.T) {
	tests := []struct {
		list    string
		want    string
		wantErr string
	}{
		{"public.outbox", "public.outbox", ""},
		{" public.outbox , billing.outbox ", "public.outbox,billing.outbox", ""},
		{`^public\.outbox$`, "public.outbox", ""},
		{"outbox", "", `"outbox" is not a plain`},
		{"public.outbox.*", "", `"public.outbox.*" is not a plain`},
		{"public.(a|b)", "", "not a plain"},
	}
	for _, tt := range tests {
		tr, err := translate(t, strings.Replace(base, "table.include.list=public.outbox", "table.include.list="+tt.list, 1), "")
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%q: err = %v, want %q", tt.list, err, tt.wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tt.list, err)
			continue
		}
		if got, _ := tr.Option("table"); got != tt.want {
			t.Errorf("%q: --table %q, want %q", tt.list, got, tt.want)
		}
	}
}

func TestTranslateAutocreateModes(t *testing.T) {
	for _, mode := range []string{"", "all_tables", "filtered", "disabled", "no_tables", "bogus"} {
		conf := base
		if mode != "" {
			conf += "publication.autocreate.mode=" + mode + "\n"
		}
		tr, err := translate(t, conf, "")
		switch mode {
		case "bogus":
			if err == nil || !strings.Contains(err.Error(), "publication.autocreate.mode") {
				t.Errorf("bogus: err = %v", err)
			}
		case "":
			if err != nil || tr.AutocreateMode != AutocreateAllTables {
				t.Errorf("default: %v %q", err, tr.AutocreateMode)
			}
		default:
			if err != nil || tr.AutocreateMode != mode {
				t.Errorf("%s: %v %q", mode, err, tr.AutocreateMode)
			}
		}
	}
}

func TestTranslateDefaults(t *testing.T) {
	tr, err := translate(t, base, "")
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := tr.Option("slot"); s != DefaultSlot {
		t.Errorf("slot %q", s)
	}
	if p, _ := tr.Option("publication"); p != DefaultPublication {
		t.Errorf("publication %q", p)
	}
	if dsn, _ := tr.Option("pg-dsn"); dsn != "host=localhost user=dbz dbname=app" {
		t.Errorf("dsn %q", dsn)
	}
	if _, ok := tr.Option("kafka-brokers"); ok {
		t.Errorf("brokers set without a worker")
	}
}

func TestTranslateConverters(t *testing.T) {
	worker := "key.converter=org.apache.kafka.connect.json.JsonConverter\nkey.converter.schemas.enable=false\n" +
		"value.converter=org.apache.kafka.connect.converters.ByteArrayConverter\n"
	conf := strings.NewReplacer("key.converter=org.apache.kafka.connect.storage.StringConverter\n", "",
		"value.converter=org.apache.kafka.connect.storage.StringConverter\n", "").Replace(base)
	tr, err := translate(t, conf, worker)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Router.KeyConverter != (eventrouter.ConverterConfig{Kind: eventrouter.JSONConverter}) ||
		tr.Router.ValueConverter != (eventrouter.ConverterConfig{Kind: eventrouter.ByteArrayConverter}) {
		t.Errorf("from the worker: %+v %+v", tr.Router.KeyConverter, tr.Router.ValueConverter)
	}
	// No converter anywhere: Connect's usual JsonConverter with schemas, and a warning.
	tr, err = translate(t, conf, "")
	if err != nil {
		t.Fatal(err)
	}
	if tr.Router.ValueConverter != (eventrouter.ConverterConfig{Kind: eventrouter.JSONConverter, SchemasEnable: true}) || len(tr.Warnings) == 0 {
		t.Errorf("default: %+v, warnings %v", tr.Router.ValueConverter, tr.Warnings)
	}
	// A converter walbox neither reproduces nor maps: refused by name, its
	// sub-keys with it.
	_, err = translate(t, conf+"value.converter=com.example.XMLConverter\nvalue.converter.schema.registry.url=http://r\n", "")
	if err == nil || !strings.Contains(err.Error(), "StringConverter, JsonConverter and ByteArrayConverter") || strings.Contains(err.Error(), "schema.registry.url") {
		t.Errorf("unknown converter: %v", err)
	}
}

func TestTranslateSecurity(t *testing.T) {
	worker := `producer.security.protocol=SASL_PLAINTEXT
producer.sasl.mechanism=PLAIN
producer.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="u" password="a \\"b\\" c";
producer.ssl.truststore.location=/x.jks
`
	_, err := translate(t, base, worker)
	if err == nil || !strings.Contains(err.Error(), "keytool -exportcert") {
		t.Fatalf("jks: %v", err)
	}
	tr, err := translate(t, base, strings.Replace(worker, "producer.ssl.truststore.location=/x.jks\n", "", 1))
	if err != nil {
		t.Fatal(err)
	}
	if u, _ := tr.Option("kafka-sasl-username"); u != "u" {
		t.Errorf("user %q", u)
	}
	if p, _ := tr.Option("kafka-sasl-password"); p != `a "b" c` {
		t.Errorf("password %q", p)
	}
	if _, ok := tr.Option("kafka-tls"); ok {
		t.Errorf("tls on for SASL_PLAINTEXT")
	}
	_, err = translate(t, base, "producer.security.protocol=SASL_SSL\n")
	if err == nil || !strings.Contains(err.Error(), "GSSAPI") {
		t.Errorf("default mechanism: %v", err)
	}
}

// TestTranslateTracingKeys: tracing.operation.name names walbox's span;
// the context column and the context-only switch reach the EventRouter.
func TestTranslateTracingKeys(t *testing.T) {
	tr, err := translate(t, base+`transforms.outbox.tracing.operation.name=outbox-relay
transforms.outbox.tracing.span.context.field=trace_ctx
transforms.outbox.tracing.with.context.field.only=true
`, "")
	if err != nil {
		t.Fatal(err)
	}
	var span string
	for _, o := range tr.Options {
		if o.Flag == "tracing-span-name" {
			span = o.Value
		}
	}
	if span != "outbox-relay" {
		t.Errorf("--tracing-span-name %q, want outbox-relay (options %+v)", span, tr.Options)
	}
	if tr.Router.TracingSpanContextColumn != "trace_ctx" || !tr.Router.TracingWithContextFieldOnly {
		t.Errorf("router %q %v, want trace_ctx true", tr.Router.TracingSpanContextColumn, tr.Router.TracingWithContextFieldOnly)
	}
	for _, w := range tr.Warnings {
		if strings.Contains(w.Key, "tracing") {
			t.Errorf("warning on %s: %s", w.Key, w.Why)
		}
	}
}
