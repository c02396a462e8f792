package debezium

import (
	"strings"
	"testing"

	"github.com/walbox/walbox/debezium/eventrouter"
)

// withConverters replaces base's StringConverters with the given lines.
func withConverters(lines ...string) string {
	conf := strings.NewReplacer("key.converter=org.apache.kafka.connect.storage.StringConverter\n", "",
		"value.converter=org.apache.kafka.connect.storage.StringConverter\n", "").Replace(base)
	return conf + strings.Join(lines, "\n") + "\n"
}

const (
	confluentRegistered = "value.converter=io.confluent.connect.avro.AvroConverter\n" +
		"value.converter.schema.registry.url=http://registry:8081\n" +
		"value.converter.auto.register.schemas=false\n" +
		"value.converter.use.latest.version=true"
	apicurioRegistered = "value.converter=io.apicurio.registry.utils.converter.AvroConverter\n" +
		"value.converter.apicurio.registry.url=http://registry:8080/apis/registry/v2\n" +
		"value.converter.apicurio.registry.auto-register=false\n" +
		"value.converter.apicurio.registry.find-latest=true\n" +
		"value.converter.apicurio.registry.as-confluent=true\n" +
		"value.converter.apicurio.registry.use-id=contentId\n" +
		"value.converter.apicurio.registry.headers.enabled=false"
	stringKey = "key.converter=org.apache.kafka.connect.storage.StringConverter"
)

// TestTranslateRegistryConverters: the schema registry converters map to
// walbox's registry options, and what walbox cannot honour is refused by
// the key's name with the fix.
func TestTranslateRegistryConverters(t *testing.T) {
	for _, tc := range []struct {
		name string
		conf string
		// opts are options the translation must set (value "" = must not be set).
		opts map[string]string
		// refused are keys the error must name, with a fragment of the fix.
		refused map[string]string
		key     eventrouter.Converter
	}{
		{name: "confluent avro, registered", conf: withConverters(stringKey, confluentRegistered),
			opts: map[string]string{"value-format": "avro", "schema-registry-url": "http://registry:8081", "key-format": "", ValueSchemaSourceFlag: ""}},
		{name: "confluent protobuf", conf: withConverters(stringKey, strings.ReplaceAll(confluentRegistered, "avro.AvroConverter", "protobuf.ProtobufConverter")),
			opts: map[string]string{"value-format": "protobuf"}},
		{name: "confluent json schema", conf: withConverters(stringKey, strings.ReplaceAll(confluentRegistered, "avro.AvroConverter", "json.JsonSchemaConverter")),
			opts: map[string]string{"value-format": "json-schema"}},
		{name: "basic auth user info", conf: withConverters(stringKey, confluentRegistered,
			"value.converter.basic.auth.credentials.source=USER_INFO", "value.converter.basic.auth.user.info=fred:s3cret:x"),
			opts: map[string]string{"schema-registry-user": "fred", "schema-registry-password": "s3cret:x"}},
		{name: "bearer token", conf: withConverters(stringKey, confluentRegistered,
			"value.converter.bearer.auth.credentials.source=STATIC_TOKEN", "value.converter.bearer.auth.token=tok"),
			opts: map[string]string{"schema-registry-bearer-token": "tok"}},
		{name: "strategies and checked keys", conf: withConverters(stringKey, confluentRegistered,
			"value.converter.value.subject.name.strategy=io.confluent.kafka.serializers.subject.TopicRecordNameStrategy",
			"value.converter.latest.compatibility.strict=false", "value.converter.normalize.schemas=true",
			"value.converter.latest.cache.ttl.sec=30", "value.converter.schemas.enable=false"),
			opts: map[string]string{"value-subject-strategy": "topic-record", "schema-latest-ttl": "30s"}},
		{name: "topic name strategy is the default", conf: withConverters(stringKey, confluentRegistered,
			"value.converter.value.subject.name.strategy=io.confluent.kafka.serializers.subject.TopicNameStrategy", "value.converter.latest.cache.ttl.sec=-1"),
			opts: map[string]string{"value-subject-strategy": "", "schema-latest-ttl": ""}},
		{name: "avro key too", conf: withConverters(confluentRegistered, strings.ReplaceAll(confluentRegistered, "value.converter", "key.converter")),
			opts: map[string]string{"value-format": "avro", "key-format": "avro"}, key: eventrouter.RegistryConverter},
		{name: "apicurio", conf: withConverters(stringKey, apicurioRegistered, "value.converter.apicurio.auth.username=u", "value.converter.apicurio.auth.password=p"),
			opts: map[string]string{"value-format": "avro", "schema-registry-url": "http://registry:8080/apis/ccompat/v7", "schema-registry-user": "u", "schema-registry-password": "p"}},
		{name: "inferred", conf: withConverters(stringKey, "value.converter=io.confluent.connect.avro.AvroConverter",
			"value.converter.schema.registry.url=http://registry:8081", "transforms.outbox.table.expand.json.payload=true"),
			opts: map[string]string{"value-format": "avro", ValueSchemaSourceFlag: "inferred"}},
		{name: "apicurio inferred", conf: withConverters(stringKey, strings.ReplaceAll(apicurioRegistered, "auto-register=false", "auto-register=true"),
			"transforms.outbox.table.expand.json.payload=true"),
			opts: map[string]string{ValueSchemaSourceFlag: "inferred"}},

		{name: "auto-register without expansion", conf: withConverters(stringKey, "value.converter=io.confluent.connect.avro.AvroConverter",
			"value.converter.schema.registry.url=http://registry:8081"),
			refused: map[string]string{"value.converter.auto.register.schemas": "table.expand.json.payload=true"}},
		{name: "no auto-register, no latest", conf: withConverters(stringKey, strings.ReplaceAll(confluentRegistered, "use.latest.version=true", "use.latest.version=false")),
			refused: map[string]string{"value.converter.use.latest.version": "use.latest.version=true"}},
		{name: "no url", conf: withConverters(stringKey, strings.ReplaceAll(confluentRegistered, "value.converter.schema.registry.url=http://registry:8081\n", "")),
			refused: map[string]string{"value.converter.schema.registry.url": "set value.converter.schema.registry.url"}},
		{name: "empty url", conf: withConverters(stringKey, strings.ReplaceAll(confluentRegistered, "http://registry:8081", "")),
			refused: map[string]string{"value.converter.schema.registry.url": "registry's URL"}},
		{name: "credentials source URL with userinfo", conf: withConverters(stringKey, strings.ReplaceAll(confluentRegistered, "http://registry", "http://u:p@registry")),
			refused: map[string]string{"value.converter.schema.registry.url": "USER_INFO"}},
		{name: "SASL_INHERIT", conf: withConverters(stringKey, confluentRegistered, "value.converter.basic.auth.credentials.source=SASL_INHERIT"),
			refused: map[string]string{"value.converter.basic.auth.credentials.source": "USER_INFO"}},
		{name: "java key store", conf: withConverters(stringKey, confluentRegistered, "value.converter.schema.registry.ssl.truststore.location=/x.jks"),
			refused: map[string]string{"value.converter.schema.registry.ssl.truststore.location": "--schema-registry-tls-ca-file"}},
		{name: "unknown sub-key", conf: withConverters(stringKey, confluentRegistered, "value.converter.enhanced.avro.schema.support=true"),
			refused: map[string]string{"value.converter.enhanced.avro.schema.support": "remove it"}},
		{name: "key auto-registers", conf: withConverters(confluentRegistered, "key.converter=io.confluent.connect.avro.AvroConverter", "key.converter.schema.registry.url=http://registry:8081"),
			refused: map[string]string{"key.converter.auto.register.schemas": "<topic>-key"}},
		{name: "protobuf key", conf: withConverters(confluentRegistered, strings.ReplaceAll(strings.ReplaceAll(confluentRegistered, "value.converter", "key.converter"), "avro.AvroConverter", "protobuf.ProtobufConverter")),
			refused: map[string]string{"key.converter": "StringConverter"}},
		{name: "two registries", conf: withConverters(confluentRegistered, strings.ReplaceAll(strings.ReplaceAll(confluentRegistered, "value.converter", "key.converter"), "registry:8081", "other:8081")),
			refused: map[string]string{"value.converter": "same registry"}},
		{name: "record strategy class unknown", conf: withConverters(stringKey, confluentRegistered, "value.converter.value.subject.name.strategy=com.example.Mine"),
			refused: map[string]string{"value.converter.value.subject.name.strategy": "use one of them"}},
		{name: "apicurio defaults", conf: withConverters(stringKey, "value.converter=io.apicurio.registry.utils.converter.AvroConverter",
			"value.converter.apicurio.registry.url=http://registry:8080/apis/registry/v2", "value.converter.apicurio.registry.find-latest=true"),
			refused: map[string]string{"value.converter.apicurio.registry.as-confluent": "as-confluent=true",
				"value.converter.apicurio.registry.use-id": "use-id=contentId", "value.converter.apicurio.registry.headers.enabled": "headers.enabled=false"}},
		{name: "apicurio headers", conf: withConverters(stringKey, strings.ReplaceAll(apicurioRegistered, "headers.enabled=false", "headers.enabled=true")),
			refused: map[string]string{"value.converter.apicurio.registry.headers.enabled": "headers.enabled=false"}},
		{name: "Debezium's CloudEventsConverter", conf: withConverters(stringKey, "value.converter=io.debezium.converters.CloudEventsConverter", "value.converter.serializer.type=json"),
			refused: map[string]string{"value.converter": "--cloudevents"}},
		{name: "apicurio url", conf: withConverters(stringKey, strings.ReplaceAll(apicurioRegistered, "/apis/registry/v2", "/api")),
			refused: map[string]string{"value.converter.apicurio.registry.url": "/apis/registry/v2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := translate(t, tc.conf, "")
			if len(tc.refused) == 0 && err != nil {
				t.Fatal(err)
			}
			for k, fix := range tc.refused {
				if err == nil || !strings.Contains(err.Error(), k) || !strings.Contains(err.Error(), fix) {
					t.Errorf("want %s refused with %q in the fix, got %v", k, fix, err)
				}
			}
			if len(tc.refused) > 0 {
				return
			}
			if tr.Router.ValueConverter.Kind != eventrouter.RegistryConverter {
				t.Errorf("value converter %q, want %q", tr.Router.ValueConverter.Kind, eventrouter.RegistryConverter)
			}
			want := tc.key
			if want == "" {
				want = eventrouter.StringConverter
			}
			if tr.Router.KeyConverter.Kind != want {
				t.Errorf("key converter %q, want %q", tr.Router.KeyConverter.Kind, want)
			}
			for flag, v := range tc.opts {
				got, ok := tr.Option(flag)
				if v == "" && ok {
					t.Errorf("--%s set to %q, want it unset", flag, got)
				} else if v != "" && got != v {
					t.Errorf("--%s = %q (set %v), want %q", flag, got, ok, v)
				}
			}
			// Without expansion, the value is the payload's text: said.
			warned := false
			for _, w := range tr.Warnings {
				warned = warned || strings.Contains(w.Why, "the payload's text as a string")
			}
			if registered := !strings.Contains(tc.conf, "expand.json.payload=true") && tc.opts[ValueSchemaSourceFlag] == ""; warned != registered {
				t.Errorf("warning about the payload as a string: %v, want %v (%v)", warned, registered, tr.Warnings)
			}
			// Secrets never show in the mappings.
			for _, m := range tr.Mappings {
				if strings.Contains(m.Value, "s3cret") || (strings.Contains(m.Key, "token") && m.Value == "tok") {
					t.Errorf("secret shown: %+v", m)
				}
			}
		})
	}
}
