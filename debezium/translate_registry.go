package debezium

import (
	"strconv"
	"strings"

	"github.com/walbox/walbox/debezium/eventrouter"
	"github.com/walbox/walbox/schemareg"
)

// Schema registry converters: Confluent's AvroConverter, ProtobufConverter
// and JsonSchemaConverter, and Apicurio's AvroConverter in its Confluent
// layout. walbox does not run them: it maps their settings to its own
// registry options (--value-format, --key-format, --schema-registry-*), and
// the EventRouter hands the payload (the key) to walbox's schemareg
// encoders, which write Confluent's wire format with the registry's schema.
//
// Which schema: with auto.register.schemas=false and
// use.latest.version=true (Apicurio: auto-register=false, find-latest=true)
// the subject's latest registered version is the contract
// (--value-schema-source registered, walbox's default); with
// auto.register.schemas=true (the converters' default) and
// table.expand.json.payload=true the schema is inferred from the payload and
// registered (--value-schema-source inferred). Every other combination is
// refused by name with the settings that work.

// Converter classes walbox maps.
const (
	confluentAvroConverter       = "io.confluent.connect.avro.AvroConverter"
	confluentProtobufConverter   = "io.confluent.connect.protobuf.ProtobufConverter"
	confluentJSONSchemaConverter = "io.confluent.connect.json.JsonSchemaConverter"
	apicurioAvroConverter        = "io.apicurio.registry.utils.converter.AvroConverter"
)

// ValueSchemaSourceFlag is the walbox option that selects where the value
// schema comes from (registered or inferred).
const ValueSchemaSourceFlag = "value-schema-source"

// registryFormat returns the format of a registry converter class.
func registryFormat(class string) (schemareg.Format, bool) {
	switch class {
	case confluentAvroConverter, apicurioAvroConverter:
		return schemareg.FormatAvro, true
	case confluentProtobufConverter:
		return schemareg.FormatProtobuf, true
	case confluentJSONSchemaConverter:
		return schemareg.FormatJSONSchema, true
	}
	return "", false
}

// registryConn is what both converters must agree on: walbox has one
// registry client.
type registryConn struct {
	from              string // the converter key that set it
	url, user, passwd string
	token             string
}

// registryConverter maps a schema registry converter set at key
// ("key.converter" or "value.converter") in p, with its sub-keys.
func (t *translator) registryConverter(p *Properties, key, class string, format schemareg.Format) eventrouter.ConverterConfig {
	cc := eventrouter.ConverterConfig{Kind: eventrouter.RegistryConverter}
	isKey := key == "key.converter"
	apicurio := class == apicurioAvroConverter
	t.mapped(p, key, "--"+map[bool]string{true: "key-format", false: "value-format"}[isKey]+" "+string(format),
		"walbox encodes with its own "+string(format)+" encoder, in Confluent's wire format, with the schema the registry holds")

	sub := func(name string) (string, bool) { return t.get(p, key+"."+name) }
	boolSub := func(name string, def bool) (bool, bool) {
		v, ok := sub(name)
		if !ok {
			return def, false
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			t.fail(p, key+"."+name, "not a boolean", "use true or false")
			return def, true
		}
		t.mapped(p, key+"."+name, "(schema source)", "")
		return b, true
	}

	var conn registryConn
	conn.from = key
	var autoRegister, useLatest bool
	if apicurio {
		autoRegister, _ = boolSub("apicurio.registry.auto-register", false)
		useLatest, _ = boolSub("apicurio.registry.find-latest", false)
		t.apicurioSettings(p, key, &conn)
	} else {
		autoRegister, _ = boolSub("auto.register.schemas", true)
		useLatest, _ = boolSub("use.latest.version", false)
		t.confluentSettings(p, key, &conn, isKey)
	}
	arKey, ulKey := key+".auto.register.schemas", key+".use.latest.version"
	if apicurio {
		arKey, ulKey = key+".apicurio.registry.auto-register", key+".apicurio.registry.find-latest"
	}
	expand := t.out.Router.ExpandJSONPayload
	switch {
	case !autoRegister && useLatest:
		// The registered contract: walbox's default schema source.
		if !isKey && !expand {
			t.out.Warnings = append(t.out.Warnings, Problem{Key: ulKey, Where: p.Where(ulKey),
				Why: "table.expand.json.payload is false, so the value is the payload's text as a string of the registered schema, as Debezium's is " +
					"(the latest schema must be an Avro \"string\" or a JSON Schema of type string); for a record schema set table.expand.json.payload=true"})
		}
	case autoRegister && !isKey && expand:
		t.setOption(ValueSchemaSourceFlag, "inferred", arKey, "table.expand.json.payload")
	case autoRegister && isKey:
		t.fail(p, arKey, "walbox registers no key schemas: the key is the aggregate id's text, encoded with the latest schema of the subject <topic>-key",
			"register the key schema (an Avro \"string\", or a JSON Schema of type string) under <topic>-key and set "+arKey+"=false and "+ulKey+"=true")
	case autoRegister:
		t.fail(p, arKey, "with table.expand.json.payload=false Debezium registers a \"string\" schema for the payload's text; walbox infers and registers schemas only from an expanded JSON payload",
			"set table.expand.json.payload=true (the schema is then inferred from the payload, as Debezium infers it), or register the schema yourself and set "+arKey+"=false and "+ulKey+"=true")
	default:
		t.fail(p, ulKey, "without auto-registration and without the latest version the converter looks up the id of the schema it derives from each record, which walbox does not derive",
			"set "+ulKey+"=true (the subject's latest version is then the contract)")
	}
	if format == schemareg.FormatProtobuf && isKey {
		t.fail(p, key, "walbox encodes the key as the aggregate id's text, and a Protobuf schema is a message", "use StringConverter, or an Avro or JSON Schema converter, for the key")
	}

	urlKey := key + ".schema.registry.url"
	if apicurio {
		urlKey = key + ".apicurio.registry.url"
	}
	if v, given := p.Get(urlKey); !given {
		t.fail(nil, urlKey, "missing: the converter needs the registry", "set "+urlKey)
	} else if strings.TrimSpace(v) == "" {
		t.fail(p, urlKey, "empty: the converter needs the registry", "set it to the registry's URL")
	}
	if t.registry == nil {
		t.registry = &conn
		if conn.url != "" {
			t.setOption("schema-registry-url", conn.url, conn.from)
		}
		if conn.user != "" {
			t.setOption("schema-registry-user", conn.user, conn.from)
			t.setOption("schema-registry-password", conn.passwd, conn.from)
		}
		if conn.token != "" {
			t.setOption("schema-registry-bearer-token", conn.token, conn.from)
		}
	} else if r := t.registry; r.url != conn.url || r.user != conn.user || r.passwd != conn.passwd || r.token != conn.token {
		t.fail(p, key, "the key and value converters name different registries or credentials; walbox has one registry client",
			"give both converters the same registry settings")
	}
	if isKey {
		t.setOption("key-format", string(format), key)
	} else {
		t.setOption("value-format", string(format), key)
	}

	// Any other sub-key: refused by name.
	for _, e := range p.Entries() {
		s, ok := strings.CutPrefix(e.Key, key+".")
		if !ok || t.used[p][e.Key] {
			continue
		}
		switch {
		case s == "schemas.enable":
			t.warn(p, e.Key, "JsonConverter's setting; "+class+" ignores it; no effect on the records")
		case s == "schemas.cache.size" || s == "max.schemas.per.subject" || s == "schema.registry.cache.capacity":
			t.warn(p, e.Key, "a cache size of the converter; walbox keeps --schema-cache-size subjects; no effect on the records")
		case strings.HasPrefix(s, "schema.registry.ssl.") || strings.HasPrefix(s, "apicurio.registry.request.ssl."):
			t.fail(p, e.Key, "walbox reads PEM files, not Java key stores, for the registry's TLS",
				"remove it and set --schema-registry-tls-ca-file (and --schema-registry-tls-cert-file / --schema-registry-tls-key-file for mutual TLS)")
		default:
			t.fail(p, e.Key, "a setting of "+class+" walbox does not reproduce", "remove it (or set the converter's default)")
		}
	}
	return cc
}

// confluentSettings reads the sub-keys of Confluent's converters.
func (t *translator) confluentSettings(p *Properties, key string, conn *registryConn, isKey bool) {
	k := func(n string) string { return key + "." + n }
	if v, ok := t.get(p, k("schema.registry.url")); ok {
		conn.url = v
		t.mapped(p, k("schema.registry.url"), "--schema-registry-url", "")
	}
	source := "URL" // Confluent's default for basic.auth.credentials.source
	if v, ok := t.get(p, k("basic.auth.credentials.source")); ok {
		source = strings.ToUpper(v)
	}
	info, hasInfo := t.get(p, k("basic.auth.user.info"))
	if v, ok := t.get(p, k("schema.registry.basic.auth.user.info")); ok && !hasInfo {
		info, hasInfo = v, true
	}
	switch {
	case source == "USER_INFO" && hasInfo:
		user, pass, ok := strings.Cut(info, ":")
		if !ok || user == "" {
			t.fail(p, k("basic.auth.user.info"), "not USER:PASSWORD", "give the registry's user and password as USER:PASSWORD")
			break
		}
		conn.user, conn.passwd = user, pass
		t.mapped(p, k("basic.auth.credentials.source"), "(checked)", "")
		t.mapped(p, k("basic.auth.user.info"), "--schema-registry-user, --schema-registry-password", "")
	case source == "USER_INFO":
		t.fail(p, k("basic.auth.credentials.source"), "USER_INFO without "+k("basic.auth.user.info"), "set "+k("basic.auth.user.info")+"=USER:PASSWORD")
	case source == "URL":
		if _, ok := p.Get(k("basic.auth.credentials.source")); ok {
			t.mapped(p, k("basic.auth.credentials.source"), "(default)", "")
		}
		if hasInfo {
			t.warn(p, k("basic.auth.user.info"), "ignored, as the converter ignores it with basic.auth.credentials.source=URL (the default); set it to USER_INFO to use it")
		}
		if strings.Contains(conn.url, "@") {
			t.fail(p, k("schema.registry.url"), "credentials in the registry URL, which walbox does not take",
				"set "+k("basic.auth.credentials.source")+"=USER_INFO and "+k("basic.auth.user.info")+"=USER:PASSWORD, and remove them from the URL")
		}
	default:
		t.fail(p, k("basic.auth.credentials.source"), "walbox takes the registry's basic authentication from USER_INFO only, not "+source,
			"set it to USER_INFO with "+k("basic.auth.user.info")+"=USER:PASSWORD")
	}
	if v, ok := t.get(p, k("bearer.auth.credentials.source")); ok {
		tok, hasTok := t.get(p, k("bearer.auth.token"))
		if strings.ToUpper(v) != "STATIC_TOKEN" || !hasTok {
			t.fail(p, k("bearer.auth.credentials.source"), "walbox takes a static bearer token only", "set it to STATIC_TOKEN with "+k("bearer.auth.token"))
		} else {
			conn.token = tok
			t.mapped(p, k("bearer.auth.credentials.source"), "(checked)", "")
			t.mapped(p, k("bearer.auth.token"), "--schema-registry-bearer-token", "")
		}
	}
	strategyKey := "value.subject.name.strategy"
	if isKey {
		strategyKey = "key.subject.name.strategy"
	}
	if v, ok := t.get(p, k(strategyKey)); ok {
		s, known := schemareg.StrategyForClass(v)
		switch {
		case !known:
			t.fail(p, k(strategyKey), "not one of Confluent's TopicNameStrategy, RecordNameStrategy, TopicRecordNameStrategy", "use one of them")
		case isKey && s != schemareg.TopicName:
			t.fail(p, k(strategyKey), "walbox names key subjects <topic>-key only", "remove it (TopicNameStrategy)")
		case s == schemareg.TopicName:
			t.mapped(p, k(strategyKey), "(default)", "<topic>-value")
		default:
			t.setOption("value-subject-strategy", string(s), k(strategyKey))
			t.mapped(p, k(strategyKey), "--value-subject-strategy", "the record's name comes from the schema Connect derives; give it to walbox with --value-record-name")
		}
	}
	if v, ok := t.get(p, k("latest.compatibility.strict")); ok {
		if _, err := strconv.ParseBool(v); err != nil {
			t.fail(p, k("latest.compatibility.strict"), "not a boolean", "use true or false")
		} else {
			t.mapped(p, k("latest.compatibility.strict"), "(checked)", "walbox checks every payload against the latest schema itself; a payload that does not fit is an invalid row")
		}
	}
	if v, ok := t.get(p, k("normalize.schemas")); ok {
		if _, err := strconv.ParseBool(v); err != nil {
			t.fail(p, k("normalize.schemas"), "not a boolean", "use true or false")
		} else {
			t.mapped(p, k("normalize.schemas"), "(checked)", "normalization changes how a schema is looked up or registered, not the records' bytes")
		}
	}
	if v, ok := t.get(p, k("latest.cache.ttl.sec")); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		switch {
		case err != nil || n < -1 || n > 1<<31:
			t.fail(p, k("latest.cache.ttl.sec"), "not a number of seconds", "give -1 (no expiry, the default) or a number of seconds")
		case n == -1:
			t.mapped(p, k("latest.cache.ttl.sec"), "(default)", "the latest version is read once per subject")
		case isKey:
			t.fail(p, k("latest.cache.ttl.sec"), "walbox reads the key subjects' latest version once", "remove it")
		default:
			t.setOption("schema-latest-ttl", msDuration(n*1000).String(), k("latest.cache.ttl.sec"))
			t.mapped(p, k("latest.cache.ttl.sec"), "--schema-latest-ttl", "")
		}
	}
	if v, ok := t.get(p, k("use.schema.id")); ok {
		n, err := strconv.Atoi(v)
		switch {
		case err != nil || n < -1 || n == 0:
			t.fail(p, k("use.schema.id"), "not a schema id", "give a schema id, or -1 (the default)")
		case n == -1:
			t.mapped(p, k("use.schema.id"), "(default)", "")
		case isKey:
			t.fail(p, k("use.schema.id"), "walbox pins no key schema", "remove it")
		default:
			t.setOption("value-schema-id", v, k("use.schema.id"))
			t.mapped(p, k("use.schema.id"), "--value-schema-id", "")
		}
	}
	if v, ok := t.get(p, k("connect.meta.data")); ok {
		if _, err := strconv.ParseBool(v); err != nil {
			t.fail(p, k("connect.meta.data"), "not a boolean", "use true or false")
		} else {
			t.mapped(p, k("connect.meta.data"), "(checked)", "Connect's metadata in schemas the converter derives; with the registered schema the records' bytes are the same")
		}
	}
}

// apicurioSettings reads the sub-keys of Apicurio's AvroConverter: walbox
// writes Confluent's layout (the magic byte and the 4-byte id in the value)
// with the ids of Apicurio's Confluent-compatible API, so as-confluent=true,
// use-id=contentId and headers.enabled=false are required.
func (t *translator) apicurioSettings(p *Properties, key string, conn *registryConn) {
	k := func(n string) string { return key + ".apicurio." + n }
	if v, ok := t.get(p, k("registry.url")); ok {
		u := strings.TrimRight(v, "/")
		base, found := "", false
		for _, api := range []string{"/apis/registry/v2", "/apis/registry/v3", "/apis/ccompat/v7", "/apis/ccompat/v6"} {
			if b, ok := strings.CutSuffix(u, api); ok {
				base, found = b, true
				break
			}
		}
		if !found {
			t.fail(p, k("registry.url"), "not the URL of Apicurio's API (ending in /apis/registry/v2)",
				"give Apicurio's API URL, such as http://registry:8080/apis/registry/v2 (walbox speaks its Confluent-compatible API at /apis/ccompat/v7)")
		} else {
			conn.url = base + "/apis/ccompat/v7"
			t.mapped(p, k("registry.url"), "--schema-registry-url "+redact("url", conn.url), "Apicurio's Confluent-compatible API, which walbox speaks")
		}
	}
	if user, ok := t.get(p, k("auth.username")); ok {
		pass, _ := t.get(p, k("auth.password"))
		conn.user, conn.passwd = user, pass
		t.mapped(p, k("auth.username"), "--schema-registry-user", "")
		t.mapped(p, k("auth.password"), "--schema-registry-password", "")
	}
	need := func(name, want, why string) {
		v, ok := t.get(p, k(name))
		if ok && strings.EqualFold(v, want) {
			t.mapped(p, k(name), "(checked)", why)
			return
		}
		what := "missing"
		if ok {
			what = "is " + strconv.Quote(v)
		}
		t.fail(p, k(name), what+": "+why, "set "+k(name)+"="+want)
	}
	need("registry.as-confluent", "true", "walbox writes Confluent's layout: the magic byte and a 4-byte schema id (Apicurio's own layout has an 8-byte id)")
	need("registry.use-id", "contentId", "the 4-byte id walbox writes is the one Apicurio's Confluent-compatible API serves, its contentId")
	need("registry.headers.enabled", "false", "walbox writes the schema id in the value, not in apicurio.* headers (the converter's default)")
	if v, ok := t.get(p, k("registry.id-handler")); ok {
		if v == "io.apicurio.registry.serde.Legacy4ByteIdHandler" {
			t.mapped(p, k("registry.id-handler"), "(checked)", "the 4-byte id as-confluent sets")
		} else {
			t.fail(p, k("registry.id-handler"), "walbox writes Confluent's 4-byte id only", "remove it (as-confluent=true sets Legacy4ByteIdHandler)")
		}
	}
	if v, ok := t.get(p, k("registry.artifact-resolver-strategy")); ok {
		if v == "io.apicurio.registry.serde.strategy.TopicIdStrategy" {
			t.mapped(p, k("registry.artifact-resolver-strategy"), "(default)", "<topic>-value")
		} else {
			t.fail(p, k("registry.artifact-resolver-strategy"), "walbox names the subject <topic>-value (TopicIdStrategy) in Debezium mode with Apicurio", "remove it")
		}
	}
}
