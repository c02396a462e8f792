package eventrouter

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/tracing"
)

// Header names Debezium sets on every outbox record.
const (
	// HeaderID carries the event id column (EventRouter's "id" header).
	HeaderID = "id"

	HeaderConnectorLogicalName = "__debezium.context.connectorLogicalName"
	HeaderTaskID               = "__debezium.context.taskId"
	HeaderConnectorName        = "__debezium.context.connectorName"
	HeaderRunID                = "__debezium.context.runId"
)

// ConnectorPluginName is the __debezium.context.connectorName value: the
// Postgres connector's plugin name, not the connector's configured name.
const ConnectorPluginName = "postgresql"

// Router turns inserted outbox rows into the records Debezium's EventRouter
// produces. Not safe for concurrent use.
type Router struct {
	cfg      Config
	topics   *topicRouter
	envelope []Placement // table.fields.additional.placement, location envelope
	// onlyHeaders is Debezium's onlyHeadersInOutputMessage: no envelope
	// placement, so the value is the payload itself.
	onlyHeaders bool
	ctxHeaders  []kgo.RecordHeader

	binds map[uint32]*binding
	// valueSchemas is Debezium's payloadSchemaCache: the envelope value
	// schema built for the first row with a given payload schema, whose
	// name carries that row's route-by value, is reused for every later row
	// with that payload schema. Keyed by the payload schema's JSON.
	valueSchemas map[string]*schema

	now func() time.Time
}

// binding is a relation's resolved columns.
type binding struct {
	rel *decoder.Relation
	// afterName is the Debezium "after" struct's schema name,
	// "<topic.prefix>.<schema>.<table>.Value" (recordSchemaPrefix).
	afterName                     string
	schemas                       []*schema // per column; nil when the type is not converted
	typeErrs                      []error   // per column, why schemas[i] is nil
	id, key, payload, routeBy, ts int
	placements                    []int // per Config.AdditionalPlacement
	tracing                       int   // TracingSpanContextColumn with TraceContextHeaders, else -1
}

// New checks cfg and returns a Router. Problems wrap router.ErrInvalidConfig
// and name the Debezium property and the fix.
func New(cfg Config) (*Router, error) {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{router.ErrInvalidConfig}, args...)...))
	}
	for _, c := range []struct{ key, val string }{
		{"table.field.event.id", cfg.EventIDColumn},
		{"table.field.event.payload", cfg.PayloadColumn},
		{"route.by.field", cfg.RouteByColumn},
	} {
		if c.val == "" {
			bad("%s is empty; name the outbox column", c.key)
		}
	}
	topics, err := newTopicRouter(cfg.TopicRegex, cfg.TopicReplacement)
	if err != nil {
		bad("%v", err)
	}
	switch cfg.JSONPayloadNullBehavior {
	case "", "ignore", "optional_bytes":
	default:
		bad("table.json.payload.null.behavior %q is neither ignore nor optional_bytes", cfg.JSONPayloadNullBehavior)
	}
	switch cfg.OpInvalidBehavior {
	case "", "warn", "error", "fatal":
	default:
		bad("table.op.invalid.behavior %q is none of warn, error, fatal", cfg.OpInvalidBehavior)
	}
	r := &Router{
		cfg:          cfg,
		topics:       topics,
		onlyHeaders:  true,
		binds:        make(map[uint32]*binding),
		valueSchemas: make(map[string]*schema),
		now:          time.Now,
	}
	for _, p := range cfg.AdditionalPlacement {
		if p.Column == "" {
			bad("table.fields.additional.placement has an entry without a column")
		}
		switch p.Location {
		case "header":
		case "envelope":
			r.envelope = append(r.envelope, p)
			r.onlyHeaders = false
			if alias(p) == "payload" {
				bad("table.fields.additional.placement puts %q into the envelope as \"payload\", which the payload field already is; give it another alias", p.Column)
			}
		case "partition":
			bad("table.fields.additional.placement %q:partition is not supported in Debezium mode: "+
				"walbox's producer partitions by key; remove the entry or place the column in a header", p.Column)
		default:
			bad("table.fields.additional.placement %q has location %q; use header or envelope", p.Column, p.Location)
		}
	}
	for _, c := range []struct {
		key string
		ConverterConfig
		enc router.ValueEncoder
	}{{"key.converter", cfg.KeyConverter, cfg.Keys}, {"value.converter", cfg.ValueConverter, cfg.Values}} {
		switch c.Kind {
		case StringConverter, JSONConverter, ByteArrayConverter:
		case RegistryConverter:
			if c.enc == nil {
				bad("%s is a schema registry converter but no encoder is configured (a programming error)", c.key)
			}
		default:
			bad("converter %q is not one walbox reproduces; use StringConverter, JsonConverter, ByteArrayConverter or a schema registry converter", c.Kind)
		}
	}
	if cfg.ValueConverter.Kind == RegistryConverter && !r.onlyHeaders {
		bad("table.fields.additional.placement puts columns into the envelope, and value.converter is a schema registry converter: " +
			"walbox encodes the payload alone with the registered schema; place those columns in headers, or remove them")
	}
	if cfg.ExtendedHeaders && cfg.LogicalName == "" {
		bad("topic.prefix is empty; Debezium requires it (it is the %s header)", HeaderConnectorLogicalName)
	}
	if cfg.DeadLetterTopic != "" {
		if why := topicProblem(cfg.DeadLetterTopic); why != "" {
			bad("dead-letter topic: %s", why)
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if cfg.ExtendedHeaders {
		runID := cfg.RunID
		if runID == "" {
			runID = newUUIDv7(time.Now())
		}
		taskID := cfg.TaskID
		if taskID == "" {
			taskID = "0"
		}
		r.ctxHeaders = []kgo.RecordHeader{
			{Key: HeaderConnectorLogicalName, Value: []byte(cfg.LogicalName)},
			{Key: HeaderTaskID, Value: []byte(taskID)},
			{Key: HeaderConnectorName, Value: []byte(ConnectorPluginName)},
			{Key: HeaderRunID, Value: []byte(runID)},
		}
	}
	return r, nil
}

func alias(p Placement) string {
	if p.Alias != "" {
		return p.Alias
	}
	return p.Column
}

// newUUIDv7 returns a random UUID whose first 48 bits are t in Unix
// milliseconds.
func newUUIDv7(t time.Time) string {
	var u [16]byte
	_, _ = rand.Read(u[:])
	var ms [8]byte
	binary.BigEndian.PutUint64(ms[:], uint64(t.UnixMilli()))
	copy(u[:6], ms[2:])
	u[6] = u[6]&0x0f | 0x70
	u[8] = u[8]&0x3f | 0x80
	var b [36]byte
	hex.Encode(b[0:8], u[0:4])
	b[8] = '-'
	hex.Encode(b[9:13], u[4:6])
	b[13] = '-'
	hex.Encode(b[14:18], u[6:8])
	b[18] = '-'
	hex.Encode(b[19:23], u[8:10])
	b[23] = '-'
	hex.Encode(b[24:], u[10:])
	return string(b[:])
}

// CheckColumns reports the configured columns a table lacks; Debezium fails
// on the first row without them. It satisfies slotctl.ColumnChecker.
func (r *Router) CheckColumns(table string, columns []string) error {
	type need struct{ key, column string }
	needs := []need{
		{"table.field.event.id", r.cfg.EventIDColumn},
		{"table.field.event.payload", r.cfg.PayloadColumn},
		{"route.by.field", r.cfg.RouteByColumn},
	}
	if r.cfg.EventKeyColumn != "" {
		needs = append(needs, need{"table.field.event.key", r.cfg.EventKeyColumn})
	}
	if r.cfg.EventTimestampColumn != "" {
		needs = append(needs, need{"table.field.event.timestamp", r.cfg.EventTimestampColumn})
	}
	for _, p := range r.cfg.AdditionalPlacement {
		needs = append(needs, need{"table.fields.additional.placement", p.Column})
	}
	var missing []string
	for _, n := range needs {
		if !slices.Contains(columns, n.column) {
			missing = append(missing, fmt.Sprintf("%s names column %q", n.key, n.column))
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("%w: table %s has no such column: %s; its columns are %s",
		router.ErrInvalidConfig, table, strings.Join(missing, "; "), strings.Join(columns, ", "))
}

// bind resolves rel's columns once per Relation message.
func (r *Router) bind(rel *decoder.Relation) (*binding, error) {
	if b, ok := r.binds[rel.ID]; ok && b.rel == rel {
		return b, nil
	}
	if r.cfg.ReloadColumns != nil {
		cols, err := r.cfg.ReloadColumns(rel.QualifiedName())
		if err != nil {
			return nil, fmt.Errorf("eventrouter: reload the column facts of %s for its new Relation message: %w", rel.QualifiedName(), err)
		}
		// A copy: the map came from the caller's Config.
		m := make(map[string][]ColumnInfo, len(r.cfg.Columns)+1)
		maps.Copy(m, r.cfg.Columns)
		m[rel.QualifiedName()] = cols
		r.cfg.Columns = m
	}
	b := &binding{
		rel:       rel,
		afterName: recordSchemaPrefix(r.cfg, rel) + ".Value",
		schemas:   make([]*schema, len(rel.Columns)),
		typeErrs:  make([]error, len(rel.Columns)),
		id:        rel.ColumnIndex(r.cfg.EventIDColumn),
		key:       -1,
		payload:   rel.ColumnIndex(r.cfg.PayloadColumn),
		routeBy:   rel.ColumnIndex(r.cfg.RouteByColumn),
		ts:        -1,
		tracing:   -1,
	}
	if r.cfg.TraceContextHeaders && r.cfg.TracingSpanContextColumn != "" {
		b.tracing = rel.ColumnIndex(r.cfg.TracingSpanContextColumn)
	}
	if r.cfg.EventKeyColumn != "" {
		b.key = rel.ColumnIndex(r.cfg.EventKeyColumn)
	}
	if r.cfg.EventTimestampColumn != "" {
		b.ts = rel.ColumnIndex(r.cfg.EventTimestampColumn)
	}
	for _, p := range r.cfg.AdditionalPlacement {
		b.placements = append(b.placements, rel.ColumnIndex(p.Column))
	}
	info := r.cfg.Columns[rel.QualifiedName()]
	for i := range rel.Columns {
		c := &rel.Columns[i]
		notNull, def := c.Key, ""
		if info != nil {
			notNull = false
			for _, ci := range info {
				if ci.Name == c.Name {
					notNull, def = ci.NotNull, ci.Default
					break
				}
			}
		}
		b.schemas[i], b.typeErrs[i] = columnSchema(c, !notNull)
		if b.schemas[i] != nil {
			b.schemas[i].def = columnDefault(c, b.schemas[i], def)
		}
	}
	if len(r.binds) >= 256 {
		clear(r.binds)
	}
	r.binds[rel.ID] = b
	return b, nil
}

// rowError is a problem with one row: the column at fault and why.
type rowError struct {
	column, reason string
}

func (e *rowError) Error() string { return e.reason }

func rowErr(column, format string, args ...any) *rowError {
	return &rowError{column: column, reason: fmt.Sprintf(format, args...)}
}

// Route maps one inserted outbox row to the record Debezium would produce.
// A row Debezium fails on is an *router.InvalidRowError, or a dead-letter
// record when Config.DeadLetterTopic is set. Not safe for concurrent use.
func (r *Router) Route(ins *decoder.Insert) (router.Routed, error) {
	if ins == nil || ins.Relation == nil {
		return router.Routed{}, errors.New("eventrouter: Route called with a nil insert or relation")
	}
	rel := ins.Relation
	if len(ins.Values) != len(rel.Columns) {
		return router.Routed{}, fmt.Errorf("eventrouter: insert into %s at LSN %s has %d values for %d columns",
			rel.QualifiedName(), ins.LSN, len(ins.Values), len(rel.Columns))
	}
	b, err := r.bind(rel)
	if err != nil {
		return router.Routed{}, err
	}
	rec, eventID, rerr := r.build(ins, b)
	if rerr == nil {
		rerr, err = r.encode(rec)
		if err != nil {
			id := "<none>"
			if eventID != "" {
				id = strconv.Quote(eventID)
			}
			return router.Routed{}, fmt.Errorf("eventrouter: row id %s in %s at LSN %s (xid %d), topic %q: %w",
				id, rel.QualifiedName(), ins.LSN, ins.XID, rec.Topic, err)
		}
	}
	if rerr == nil {
		return router.Routed{Record: rec, EventID: eventID}, nil
	}
	return r.invalid(ins, b, eventID, rerr)
}

// encode runs the schema registry encoders on a built record whose
// converters are RegistryConverter: the key's text, then the payload's
// JSON. A payload or key the encoder finds invalid is a *rowError; any
// other error is the registry's and is returned as the error.
func (r *Router) encode(rec *kgo.Record) (*rowError, error) {
	cfg := &r.cfg
	if cfg.KeyConverter.Kind == RegistryConverter && rec.Key != nil {
		out, err := cfg.Keys.EncodeValue(nil, rec.Topic, rec.Key)
		switch {
		case err == nil:
			rec.Key = out
		case router.IsInvalidPayload(err):
			return rowErr(cfg.EventKeyColumn, "key.converter: column %q: %v", cfg.EventKeyColumn, err), nil
		default:
			return nil, fmt.Errorf("key.converter: %w", err)
		}
	}
	if cfg.ValueConverter.Kind == RegistryConverter && rec.Value != nil {
		doc := rec.Value
		if !cfg.ExpandJSONPayload {
			// Debezium's value is then the payload's text, a Connect
			// string, which the converter writes as a string of the
			// schema (an Avro "string", a JSON Schema of type string).
			doc, _ = json.Marshal(string(rec.Value))
		}
		out, err := cfg.Values.EncodeValue(nil, rec.Topic, doc)
		switch {
		case err == nil:
			rec.Value = out
		case router.IsInvalidPayload(err):
			return rowErr(cfg.PayloadColumn, "value.converter: column %q: %v", cfg.PayloadColumn, err), nil
		default:
			return nil, fmt.Errorf("value.converter: %w", err)
		}
	}
	return nil, nil
}

// get returns column i's schema and value, or why there is none; a NULL
// reads as the column's default, as Struct.get returns it.
func (r *Router) get(ins *decoder.Insert, b *binding, i int, key, column string) (*schema, any, *rowError) {
	s, v, rerr := r.getRaw(ins, b, i, key, column)
	if rerr == nil && v == nil {
		v = s.def
	}
	return s, v, rerr
}

// getRaw is get without the default: an explicit NULL stays nil, as
// Debezium reads the route-by and the timestamp columns
// (Struct.getWithoutDefault).
func (r *Router) getRaw(ins *decoder.Insert, b *binding, i int, key, column string) (*schema, any, *rowError) {
	if i < 0 {
		return nil, nil, rowErr(column, "%s: table %s has no column %q", key, ins.Relation.QualifiedName(), column)
	}
	if b.typeErrs[i] != nil {
		return nil, nil, rowErr(column, "%s: %v", key, b.typeErrs[i])
	}
	v, err := columnValue(&ins.Relation.Columns[i], b.schemas[i], &ins.Values[i])
	if err != nil {
		return nil, nil, rowErr(column, "%s: %v", key, err)
	}
	return b.schemas[i], v, nil
}

// build follows EventRouterDelegate.apply step by step, so that the row
// fails where Debezium's does.
func (r *Router) build(ins *decoder.Insert, b *binding) (*kgo.Record, string, *rowError) {
	cfg := &r.cfg
	payloadSchema, payload, rerr := r.get(ins, b, b.payload, "table.field.event.payload", cfg.PayloadColumn)
	if rerr != nil {
		return nil, "", rerr
	}
	ts, rerr := r.timestamp(ins, b)
	if rerr != nil {
		return nil, "", rerr
	}
	_, eventID, rerr := r.get(ins, b, b.id, "table.field.event.id", cfg.EventIDColumn)
	if rerr != nil {
		return nil, "", rerr
	}
	eventIDText := ""
	if eventID != nil {
		eventIDText = string(headerValue(eventID))
	}

	headers := make([]kgo.RecordHeader, 0, len(r.ctxHeaders)+1+len(cfg.AdditionalPlacement))
	headers = append(headers, r.ctxHeaders...)
	headers = append(headers, kgo.RecordHeader{Key: HeaderID, Value: headerValue(eventID)})

	// expandFailed: the schema was inferred but the value could not follow,
	// so the payload is still the text under the inferred schema.
	expandFailed := false
	if cfg.ExpandJSONPayload && cfg.ValueConverter.Kind != RegistryConverter {
		if s, ok := payload.(string); ok {
			payloadSchema, payload, expandFailed = expandJSON(cfg.PayloadColumn, s, payloadSchema, cfg.JSONPayloadNullBehavior == "optional_bytes")
		}
	}

	var routeBy any
	routeByFetched := false
	fetchRouteBy := func() *rowError {
		if routeByFetched {
			return nil
		}
		routeByFetched = true
		s, v, rerr := r.getRaw(ins, b, b.routeBy, "route.by.field", cfg.RouteByColumn)
		if rerr != nil {
			return rerr
		}
		if s.typ != kString {
			return rowErr(cfg.RouteByColumn, "route.by.field: column %q is a %s, not a string column", cfg.RouteByColumn, s.typ)
		}
		routeBy = v
		return nil
	}

	var value any
	var valueSchema *schema
	if !r.onlyHeaders {
		if rerr := fetchRouteBy(); rerr != nil {
			return nil, eventIDText, rerr
		}
		vs, rerr := r.valueSchema(ins, b, payloadSchema, routeBy)
		if rerr != nil {
			return nil, eventIDText, rerr
		}
		if expandFailed {
			return nil, eventIDText, rowErr(cfg.PayloadColumn, "table.expand.json.payload: the payload's inferred schema does not fit its value (Debezium's JSON expansion failed half way)")
		}
		st := &structVal{schema: vs, values: make([]any, len(vs.fields))}
		st.values[0] = payload
		value, valueSchema = st, vs
	}
	for i, p := range cfg.AdditionalPlacement {
		s, v, rerr := r.get(ins, b, b.placements[i], "table.fields.additional.placement", p.Column)
		if rerr != nil {
			return nil, eventIDText, rerr
		}
		_ = s
		switch p.Location {
		case "envelope":
			st := value.(*structVal)
			st.values[st.schema.fieldIndex(alias(p))] = v
		case "header":
			headers = append(headers, kgo.RecordHeader{Key: alias(p), Value: headerValue(v)})
		}
	}

	if b.tracing >= 0 && ins.Values[b.tracing].Kind == decoder.KindText {
		ctx := tracing.ParseContextText(ins.Values[b.tracing].Data)
		for _, k := range []string{"traceparent", "tracestate"} {
			if v, ok := ctx[k]; ok && v != "" {
				headers = append(headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
		}
	}

	isDelete := payload == nil
	if s, ok := payload.(string); ok && javaTrimEmpty(s) {
		isDelete = true
	}
	switch {
	case isDelete && cfg.TombstoneOnEmptyPayload:
		value, valueSchema = nil, nil
	case r.onlyHeaders:
		value, valueSchema = payload, payloadSchema
	}

	keySchema := &schema{typ: kString} // Schema.STRING_SCHEMA
	var key any
	if cfg.EventKeyColumn != "" {
		s, v, rerr := r.get(ins, b, b.key, "table.field.event.key", cfg.EventKeyColumn)
		if rerr != nil {
			return nil, eventIDText, rerr
		}
		keySchema, key = s, v
	}

	if rerr := fetchRouteBy(); rerr != nil {
		return nil, eventIDText, rerr
	}
	if routeBy == nil {
		return nil, eventIDText, rowErr(cfg.RouteByColumn, "route.by.field: column %q is NULL, so there is no topic", cfg.RouteByColumn)
	}
	topic := r.topics.route(routeBy.(string))
	if why := topicProblem(topic); why != "" {
		return nil, eventIDText, rowErr(cfg.RouteByColumn, "route.by.field: column %q routes to an invalid topic: %s", cfg.RouteByColumn, why)
	}

	keyBytes, err := convert(cfg.KeyConverter, keySchema, key)
	if err != nil {
		return nil, eventIDText, rowErr(cfg.EventKeyColumn, "key.converter: %v", err)
	}
	valueBytes, err := convert(cfg.ValueConverter, valueSchema, value)
	if err != nil {
		return nil, eventIDText, rowErr(cfg.PayloadColumn, "value.converter: %v", err)
	}
	return &kgo.Record{
		Topic:     topic,
		Key:       keyBytes,
		Value:     valueBytes,
		Headers:   headers,
		Timestamp: time.UnixMilli(ts),
	}, eventIDText, nil
}

// valueSchema returns the envelope value schema for a payload schema,
// built and cached as Debezium's getValueSchema does.
func (r *Router) valueSchema(ins *decoder.Insert, b *binding, payloadSchema *schema, routeBy any) (*schema, *rowError) {
	cacheKey := "null"
	if payloadSchema != nil {
		cacheKey = string(appendSchemaJSON(nil, payloadSchema))
	}
	if vs, ok := r.valueSchemas[cacheKey]; ok {
		return vs, nil
	}
	routed := "null" // Java's string concatenation of a null route-by value
	if s, ok := routeBy.(string); ok {
		routed = s
	}
	name := b.afterName
	if i := strings.LastIndexByte(name, '.'); i >= 0 {
		name = name[:i+1] + routed + "." + name[i+1:]
	}
	vs := &schema{typ: kStruct, name: name, fields: []field{{name: "payload", schema: payloadSchema}}}
	for i, p := range r.cfg.AdditionalPlacement {
		if p.Location != "envelope" {
			continue
		}
		idx := b.placements[i]
		if idx < 0 {
			return nil, rowErr(p.Column, "table.fields.additional.placement: table %s has no column %q", ins.Relation.QualifiedName(), p.Column)
		}
		if b.typeErrs[idx] != nil {
			return nil, rowErr(p.Column, "table.fields.additional.placement: %v", b.typeErrs[idx])
		}
		vs.fields = append(vs.fields, field{name: alias(p), schema: b.schemas[idx]})
	}
	if routeBy == nil {
		// The row fails (no topic): its schema name, with "null" in it,
		// must not be served to the next rows.
		return vs, nil
	}
	if len(r.valueSchemas) >= 10000 {
		clear(r.valueSchemas)
	}
	r.valueSchemas[cacheKey] = vs
	return vs, nil
}

// timestamp is the record timestamp in Unix milliseconds: the
// table.field.event.timestamp column when set and not NULL, otherwise the
// moment of processing (Debezium's envelope ts_ms, the connector's clock
// when it read the change).
func (r *Router) timestamp(ins *decoder.Insert, b *binding) (int64, *rowError) {
	col := r.cfg.EventTimestampColumn
	if col == "" {
		return r.now().UnixMilli(), nil
	}
	s, v, rerr := r.getRaw(ins, b, b.ts, "table.field.event.timestamp", col)
	if rerr != nil {
		return 0, rerr
	}
	if s.typ != kInt64 {
		return 0, rowErr(col, "table.field.event.timestamp: column %q is a %s; Debezium reads the event timestamp only from a timestamp (without time zone) column", col, s.typ)
	}
	if v == nil {
		return r.now().UnixMilli(), nil
	}
	n := v.(int64)
	switch s.name {
	case nameTimestamp:
		return n, nil
	case nameMicroTimestamp:
		return n / 1000, nil
	}
	return 0, rowErr(col, "table.field.event.timestamp: column %q has no timestamp type", col)
}

// convert runs a value through a Connect converter.
func convert(c ConverterConfig, s *schema, v any) ([]byte, error) {
	switch c.Kind {
	case StringConverter:
		if v == nil {
			return nil, nil
		}
		return []byte(javaString(v)), nil
	case ByteArrayConverter:
		if s != nil && s.typ != kBytes {
			return nil, fmt.Errorf("invalid schema type for ByteArrayConverter: %s (it passes only bytea columns)", strings.ToUpper(s.typ.String()))
		}
		if v == nil {
			return nil, nil
		}
		b, ok := v.([]byte)
		if !ok {
			return nil, fmt.Errorf("ByteArrayConverter got a %s, not bytes", javaClass(v))
		}
		return b, nil
	case RegistryConverter:
		// The text the encoder reads: the payload's JSON, the key's text,
		// a bytea payload's bytes (pre-encoded).
		switch x := v.(type) {
		case nil:
			return nil, nil
		case string:
			return []byte(x), nil
		case []byte:
			return nil, fmt.Errorf("a bytea payload: Debezium's registry converters write it as bytes of the schema, which walbox does not; " +
				"use a text, json or jsonb payload column, or ByteArrayConverter with --value-format pre-encoded for payloads already in Confluent's wire format")
		case *structVal:
			return nil, fmt.Errorf("a schema registry converter encodes a text, json, jsonb or bytea column, not a %s", javaClass(v))
		}
		return []byte(javaString(v)), nil
	default: // JSONConverter
		if s == nil && v == nil {
			return nil, nil
		}
		var b []byte
		var err error
		if c.SchemasEnable {
			b, err = appendJSONEnvelope(nil, s, v)
		} else {
			b, err = appendValueJSON(nil, s, v)
		}
		if err == nil && jsonDeeperThan(b, maxDepth) {
			// Jackson's StreamWriteConstraints: JsonConverter throws.
			return nil, errConversionf("document nesting depth exceeds the maximum allowed (%d)", maxDepth)
		}
		return b, err
	}
}

// jsonDeeperThan reports whether JSON text b nests arrays and objects
// deeper than limit. Only a JSON payload expanded from the outbox can come
// near it (the record's envelope and, with schemas, the schema's JSON add
// levels to the payload's own).
func jsonDeeperThan(b []byte, limit int) bool {
	if len(b) <= 2*limit {
		return false
	}
	depth, inString := 0, false
	for i := 0; i < len(b); i++ {
		switch c := b[i]; {
		case inString:
			if c == '\\' {
				i++
			} else if c == '"' {
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > limit {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// invalid reports a row Debezium would fail on.
func (r *Router) invalid(ins *decoder.Insert, b *binding, eventID string, e *rowError) (router.Routed, error) {
	table := ins.Relation.QualifiedName()
	if r.cfg.DeadLetterTopic == "" {
		return router.Routed{}, &router.InvalidRowError{
			EventID: eventID, LSN: ins.LSN, XID: ins.XID, Table: table, Column: e.column,
			Reason: "Debezium's EventRouter would fail its task on this row: " + e.reason,
		}
	}
	raw := func(i int) []byte {
		if i < 0 || ins.Values[i].Kind != decoder.KindText {
			return nil
		}
		return ins.Values[i].Data
	}
	rec := &kgo.Record{Topic: r.cfg.DeadLetterTopic, Key: raw(b.key), Value: raw(b.payload)}
	if eventID != "" {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: HeaderID, Value: []byte(eventID)})
	}
	rec.Headers = append(rec.Headers,
		kgo.RecordHeader{Key: router.HeaderError, Value: []byte(e.reason)},
		kgo.RecordHeader{Key: router.HeaderTable, Value: []byte(table)},
		kgo.RecordHeader{Key: router.HeaderLSN, Value: []byte(ins.LSN.String())},
		kgo.RecordHeader{Key: router.HeaderXID, Value: strconv.AppendUint(nil, uint64(ins.XID), 10)},
	)
	return router.Routed{Record: rec, EventID: eventID, DeadLetter: true, Reason: e.reason}, nil
}
