package debezium

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/walbox/walbox/debezium/eventrouter"
)

// transforms maps the one EventRouter transform.
func (t *translator) transforms() {
	c := t.conn
	v, ok := t.get(c, "transforms")
	var names []string
	for _, n := range strings.Split(v, ",") {
		if n = strings.TrimSpace(n); n != "" {
			names = append(names, n)
		}
	}
	if !ok || len(names) == 0 {
		t.fail(nil, "transforms", "missing: walbox's Debezium mode reproduces the outbox EventRouter",
			"add transforms=outbox and transforms.outbox.type="+EventRouterClass)
		return
	}
	router := ""
	for _, n := range names {
		typ, _ := t.get(c, "transforms."+n+".type")
		if typ == EventRouterClass && router == "" {
			router = n
			continue
		}
		t.fail(c, "transforms", fmt.Sprintf("transform %q (type %q) is not supported: walbox reproduces only one %s", n, typ, EventRouterClass),
			"remove the other transforms (consumers would see records the other transforms did not touch)")
		// Its own keys are part of this one problem.
		for _, e := range c.Entries() {
			if strings.HasPrefix(e.Key, "transforms."+n+".") {
				t.used[c][e.Key] = true
			}
		}
	}
	if router == "" {
		if len(t.problems) == 0 || t.problems[len(t.problems)-1].Key != "transforms" {
			t.fail(c, "transforms", "no transform of type "+EventRouterClass, "add one")
		}
		return
	}
	t.mapped(c, "transforms", "(checked)", "the EventRouter transform "+strconv.Quote(router))
	t.mapped(c, "transforms."+router+".type", "eventrouter", "")
	t.eventRouter("transforms." + router + ".")
}

func (t *translator) eventRouter(prefix string) {
	c := t.conn
	r := &t.out.Router
	str := func(key string, field *string, name string) {
		if v, ok := t.get(c, prefix+key); ok {
			*field = v
			t.mapped(c, prefix+key, "eventrouter."+name, "")
		}
	}
	boolean := func(key string, field *bool, name string) {
		if v, ok := t.get(c, prefix+key); ok {
			b, err := strconv.ParseBool(v)
			if err != nil {
				t.fail(c, prefix+key, "not a boolean", "use true or false")
				return
			}
			*field = b
			t.mapped(c, prefix+key, "eventrouter."+name, "")
		}
	}
	enum := func(key string, field *string, name string, allowed ...string) {
		v, ok := t.get(c, prefix+key)
		if !ok {
			return
		}
		for _, a := range allowed {
			if strings.EqualFold(v, a) {
				*field = a
				t.mapped(c, prefix+key, "eventrouter."+name, "")
				return
			}
		}
		t.fail(c, prefix+key, "unknown value", "use one of "+strings.Join(allowed, ", "))
	}
	str("table.field.event.id", &r.EventIDColumn, "EventIDColumn")
	str("table.field.event.key", &r.EventKeyColumn, "EventKeyColumn")
	str("table.field.event.payload", &r.PayloadColumn, "PayloadColumn")
	str("table.field.event.timestamp", &r.EventTimestampColumn, "EventTimestampColumn")
	str("route.by.field", &r.RouteByColumn, "RouteByColumn")
	str("route.topic.regex", &r.TopicRegex, "TopicRegex")
	str("route.topic.replacement", &r.TopicReplacement, "TopicReplacement")
	boolean("route.tombstone.on.empty.payload", &r.TombstoneOnEmptyPayload, "TombstoneOnEmptyPayload")
	boolean("table.expand.json.payload", &r.ExpandJSONPayload, "ExpandJSONPayload")
	enum("table.json.payload.null.behavior", &r.JSONPayloadNullBehavior, "JSONPayloadNullBehavior", "ignore", "optional_bytes")
	enum("table.op.invalid.behavior", &r.OpInvalidBehavior, "OpInvalidBehavior", "warn", "error", "fatal")
	enum("debezium.op.invalid.behavior", &r.OpInvalidBehavior, "OpInvalidBehavior", "warn", "error", "fatal") // its name before Debezium 1.2
	str("tracing.span.context.field", &r.TracingSpanContextColumn, "TracingSpanContextColumn")
	boolean("tracing.with.context.field.only", &r.TracingWithContextFieldOnly, "TracingWithContextFieldOnly")
	if v, ok := t.get(c, prefix+"table.fields.additional.placement"); ok {
		ps, err := ParsePlacements(v)
		if err != nil {
			t.fail(c, prefix+"table.fields.additional.placement", err.Error(), "write column:header|envelope|partition[:alias], comma-separated")
		} else {
			r.AdditionalPlacement = ps
			t.mapped(c, prefix+"table.fields.additional.placement", "eventrouter.AdditionalPlacement", "")
		}
	}
	if v, ok := t.get(c, prefix+"tracing.operation.name"); ok && strings.TrimSpace(v) != "" {
		// Debezium names its processing span so; walbox's one span per
		// event (package tracing) is that span.
		t.setOption("tracing-span-name", strings.TrimSpace(v), prefix+"tracing.operation.name")
		t.mapped(c, prefix+"tracing.operation.name", "--tracing-span-name", "the name of walbox's producer span (Debezium's processing span)")
	}
	if v, ok := t.get(c, prefix+"table.fields.additional.error.on.missing"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil || !b {
			t.fail(c, prefix+"table.fields.additional.error.on.missing", "walbox requires every additional field's column to exist (it checks at start)",
				"remove it or set it to true")
		} else {
			t.mapped(c, prefix+"table.fields.additional.error.on.missing", "(default)", "")
		}
	}
	for _, k := range []string{"table.field.event.schema.version", "table.field.event.payload.id", "route.topic.regex.case.insensitive"} {
		if v, ok := t.get(c, prefix+k); ok && v != "" {
			t.fail(c, prefix+k, "not reproduced by walbox's EventRouter", "remove it")
		}
	}
	for _, k := range []string{"predicate", "negate"} {
		if v, ok := t.get(c, prefix+k); ok && v != "" {
			t.fail(c, prefix+k, "walbox does not evaluate transform predicates", "remove it: every row of the outbox tables is an event")
		}
	}
	// Any other key of the transform.
	for _, e := range c.Entries() {
		if strings.HasPrefix(e.Key, prefix) && !t.used[c][e.Key] {
			t.fail(c, e.Key, "not a key of the outbox EventRouter that walbox knows", "remove it, or check its spelling")
		}
	}
}

// ParsePlacements parses table.fields.additional.placement:
// "column:location[:alias]" entries, comma-separated.
func ParsePlacements(s string) ([]eventrouter.Placement, error) {
	var out []eventrouter.Placement
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		f := strings.Split(part, ":")
		if len(f) < 2 || len(f) > 3 {
			return nil, fmt.Errorf("%q is not column:location[:alias]", part)
		}
		p := eventrouter.Placement{Column: strings.TrimSpace(f[0]), Location: strings.ToLower(strings.TrimSpace(f[1]))}
		if len(f) == 3 {
			p.Alias = strings.TrimSpace(f[2])
		}
		switch p.Location {
		case "header", "envelope", "partition":
		default:
			return nil, fmt.Errorf("%q: location %q is not header, envelope or partition", part, p.Location)
		}
		if p.Column == "" {
			return nil, fmt.Errorf("%q: empty column", part)
		}
		out = append(out, p)
	}
	return out, nil
}

// converters maps key.converter and value.converter: the connector's when
// it names one (its sub-keys from the connector only), else the worker's
// (with the worker's sub-keys), as Kafka Connect does.
func (t *translator) converters() {
	t.out.Router.KeyConverter = t.converter("key.converter")
	t.out.Router.ValueConverter = t.converter("value.converter")
	if v, ok := t.get(t.conn, "header.converter"); ok && v != simpleHeaderConverter {
		t.fail(t.conn, "header.converter", "walbox writes headers as Connect's SimpleHeaderConverter does", "remove it")
	}
	if v, ok := t.get(t.worker, "header.converter"); ok && v != simpleHeaderConverter {
		t.fail(t.worker, "header.converter", "walbox writes headers as Connect's SimpleHeaderConverter does", "remove it")
	}
}

func (t *translator) converter(key string) eventrouter.ConverterConfig {
	p := t.conn
	class, ok := t.get(p, key)
	if ok {
		// The connector's converter replaces the worker's, with its settings.
		if _, wok := t.get(t.worker, key); wok {
			t.mapped(t.worker, key, "(overridden)", "by the connector's "+key)
			for _, e := range t.worker.Entries() {
				if strings.HasPrefix(e.Key, key+".") {
					t.used[t.worker][e.Key] = true
					t.mapped(t.worker, e.Key, "(overridden)", "by the connector's "+key)
				}
			}
		}
	} else {
		p = t.worker
		class, ok = t.get(p, key)
	}
	if !ok {
		def := eventrouter.Defaults().KeyConverter
		t.out.Warnings = append(t.out.Warnings, Problem{Key: key, Why: "set neither in the connector nor in the worker: assuming JsonConverter with schemas.enable=true, the converter of Connect's sample worker configurations"})
		return def
	}
	var cc eventrouter.ConverterConfig
	switch class {
	case stringConverterClass, "StringConverter":
		cc.Kind = eventrouter.StringConverter
	case jsonConverterClass, "JsonConverter":
		cc = eventrouter.ConverterConfig{Kind: eventrouter.JSONConverter, SchemasEnable: true}
	case byteArrayConverterClass, "ByteArrayConverter":
		cc.Kind = eventrouter.ByteArrayConverter
	default:
		if format, ok := registryFormat(class); ok {
			return t.registryConverter(p, key, class, format)
		}
		if class == cloudEventsConverterClass {
			t.fail(p, key, "walbox does not reproduce Debezium's CloudEventsConverter (its structured JSON with iodebezium* extension attributes, which outbox records only get through a HeaderFrom transform walbox does not run)",
				"use walbox's own mode with --cloudevents binary or structured (the CloudEvents Kafka binding: ce_id the event id, ce_type the event type), or stay on Debezium")
			t.consumePrefix(p, key+".")
			return eventrouter.Defaults().KeyConverter
		}
		t.fail(p, key, "walbox reproduces the bytes of StringConverter, JsonConverter and ByteArrayConverter, and maps Confluent's AvroConverter, ProtobufConverter and JsonSchemaConverter and Apicurio's AvroConverter to its schema registry encoders",
			"switch Debezium to one of them first (consumers must then read that format), or stay on Debezium")
		t.consumePrefix(p, key+".")
		return eventrouter.Defaults().KeyConverter
	}
	t.mapped(p, key, "eventrouter."+converterField(key), string(cc.Kind))
	for _, e := range p.Entries() {
		sub, ok := strings.CutPrefix(e.Key, key+".")
		if !ok {
			continue
		}
		v := strings.TrimSpace(e.Value)
		t.used[p][e.Key] = true
		switch {
		case sub == "schemas.enable" && cc.Kind == eventrouter.JSONConverter:
			b, err := strconv.ParseBool(v)
			if err != nil {
				t.fail(p, e.Key, "not a boolean", "use true or false")
				continue
			}
			cc.SchemasEnable = b
			t.mapped(p, e.Key, "eventrouter."+converterField(key)+".SchemasEnable", "")
		case sub == "schemas.enable" && cc.Kind != eventrouter.JSONConverter:
			if _, err := strconv.ParseBool(v); err != nil {
				t.fail(p, e.Key, "not a boolean", "use true or false")
				continue
			}
			t.warn(p, e.Key, string(cc.Kind)+" writes no schemas and ignores it; no effect on the records")
		case sub == "schemas.cache.size":
			t.warn(p, e.Key, "a cache size of the converter; no effect on the records")
		case sub == "decimal.format" && strings.EqualFold(v, "BASE64"),
			sub == "replace.null.with.default" && v == "true",
			sub == "encoding" && strings.EqualFold(v, "UTF-8"),
			sub == "converter.type":
			t.mapped(p, e.Key, "(default)", "")
		default:
			t.fail(p, e.Key, "a converter setting walbox does not reproduce", "remove it (or set Connect's default)")
		}
	}
	return cc
}

func converterField(key string) string {
	if key == "key.converter" {
		return "KeyConverter"
	}
	return "ValueConverter"
}

func (t *translator) consumePrefix(p *Properties, prefix string) {
	for _, e := range p.Entries() {
		if strings.HasPrefix(e.Key, prefix) {
			t.used[p][e.Key] = true
		}
	}
}
