package eventrouter

import "github.com/walbox/walbox/router"

// This file is the contract between the two halves of Debezium mode:
// package debezium reads a Kafka Connect connector configuration and fills
// a Config; this package turns outbox rows into the records Debezium's
// io.debezium.transforms.outbox.EventRouter would produce with it.

// Converter names a Kafka Connect converter class as walbox emulates it.
type Converter string

// The converters walbox reproduces byte for byte.
const (
	// StringConverter is org.apache.kafka.connect.storage.StringConverter.
	StringConverter Converter = "string"
	// JSONConverter is org.apache.kafka.connect.json.JsonConverter.
	JSONConverter Converter = "json"
	// ByteArrayConverter is org.apache.kafka.connect.converters.ByteArrayConverter.
	ByteArrayConverter Converter = "bytearray"
	// RegistryConverter is a schema registry converter (Confluent's
	// AvroConverter, ProtobufConverter, JsonSchemaConverter, Apicurio's
	// AvroConverter): the payload's JSON text (the key's text) goes to
	// Config.Values (Config.Keys), walbox's schemareg encoder, which writes
	// Confluent's wire format with the schema the registry holds. The
	// payload is not expanded here: the encoder reads the JSON itself.
	RegistryConverter Converter = "schema-registry"
)

// ConverterConfig is one of key.converter / value.converter.
type ConverterConfig struct {
	Kind Converter
	// SchemasEnable is <converter>.schemas.enable (JsonConverter only;
	// Connect's default is true).
	SchemasEnable bool
}

// Placement is one entry of table.fields.additional.placement:
// "column:location[:alias]".
type Placement struct {
	Column string
	// Location is "header", "envelope" or "partition".
	Location string
	// Alias is the header or field name; "" means Column.
	Alias string
}

// Config holds the EventRouter settings and the connector context that
// shapes Debezium's records. Field comments give the Debezium key and its
// default, which Defaults returns.
type Config struct {
	// Tables are the outbox tables as "schema.table" (table.include.list).
	Tables []string

	EventIDColumn        string // table.field.event.id, "id"
	EventKeyColumn       string // table.field.event.key, "aggregateid"
	PayloadColumn        string // table.field.event.payload, "payload"
	EventTimestampColumn string // table.field.event.timestamp, "" (the processing time: Debezium's envelope ts_ms)
	RouteByColumn        string // route.by.field, "aggregatetype"
	TopicRegex           string // route.topic.regex, "(?<routedByValue>.*)"
	TopicReplacement     string // route.topic.replacement, "outbox.event.${routedByValue}"

	TombstoneOnEmptyPayload bool   // route.tombstone.on.empty.payload, false
	ExpandJSONPayload       bool   // table.expand.json.payload, false
	JSONPayloadNullBehavior string // table.json.payload.null.behavior, "ignore" (or "optional_bytes")
	OpInvalidBehavior       string // table.op.invalid.behavior, "warn" (or "error", "fatal")

	AdditionalPlacement []Placement // table.fields.additional.placement

	// tracing.span.context.field ("tracingspancontext") and
	// tracing.with.context.field.only (false). Debezium injects a trace
	// header only with an OpenTelemetry SDK or agent on Connect's
	// classpath; walbox only when TraceContextHeaders is set (walbox
	// traces): then a row's TracingSpanContextColumn value, the
	// java.util.Properties text Debezium reads (traceparent=...), becomes
	// its record's traceparent (and tracestate) header, which package
	// tracing reads and replaces with the producer span's. A row without
	// the column, or with NULL, gets no header and no span, whatever
	// TracingWithContextFieldOnly says: Debezium's ActivateTracingSpan
	// creates no span without a context either.
	TracingSpanContextColumn    string
	TracingWithContextFieldOnly bool
	TraceContextHeaders         bool

	// ExtendedHeaders is extended.headers.enabled (true): the connector
	// adds __debezium.context.* headers to every record.
	ExtendedHeaders bool
	LogicalName     string // topic.prefix (required by Debezium)
	// TopicDelimiter is topic.delimiter ("."): Debezium's topic naming
	// strategy joins topic.prefix, schema and table with it into the
	// change event's topic name, which also prefixes the record schemas'
	// names (the "<prefix>.<schema>.<table>.Value" of the value schema).
	// "" means ".".
	TopicDelimiter string
	ConnectorName  string // name (not a header: __debezium.context.connectorName is the plugin name)
	TaskID         string // "0": the Postgres connector runs one task

	KeyConverter   ConverterConfig // key.converter
	ValueConverter ConverterConfig // value.converter

	// Fields added by the record builder (i10-records).

	// Columns is the catalog's view of each table ("schema.table"), as
	// LoadColumns reads it: Debezium marks a column's schema optional
	// unless it is NOT NULL, which pgoutput does not say. For a table
	// missing here, replica identity columns count as NOT NULL and all
	// others as nullable.
	Columns map[string][]ColumnInfo
	// ReloadColumns, when set, reads a table's column facts again from the
	// catalog ("schema.table", as LoadColumns) whenever the stream brings
	// a new Relation message for it, as Debezium refreshes its table
	// schema on each: an ALTER TABLE ... SET NOT NULL or SET DEFAULT
	// while walbox runs then changes the records from the next row on, as
	// it does Debezium's. Its result replaces the table's entry in
	// Columns. An error fails the row's Route with that error (not an
	// invalid row): the relay stops before confirming it, and retries if
	// the error is Postgres being unreachable. CatalogLoader.Load is one.
	ReloadColumns func(table string) ([]ColumnInfo, error)
	// DeadLetterTopic, when set, makes Route turn an invalid row into a
	// record for this topic (walbox's invalid_rows: dead-letter) instead of
	// returning an *router.InvalidRowError (Debezium fails its task).
	DeadLetterTopic string
	// Values and Keys encode the value and the key when ValueConverter
	// and KeyConverter are RegistryConverter (package schemareg's
	// encoders); both are required then. A payload the encoder finds
	// invalid (router.InvalidPayload) is an invalid row naming the payload
	// column; any other encoder error (the registry) fails Route, so the
	// row is not confirmed.
	Values, Keys router.ValueEncoder
	// RunID is the __debezium.context.runId header value; "" makes New
	// generate one (a UUIDv7, as Debezium does on each task start).
	RunID string
}

// Defaults returns Debezium's defaults for every EventRouter key and the
// converters Kafka Connect's worker uses when none is set (JsonConverter
// with schemas).
func Defaults() Config {
	return Config{
		Tables:                   []string{"public.outbox"},
		EventIDColumn:            "id",
		EventKeyColumn:           "aggregateid",
		PayloadColumn:            "payload",
		RouteByColumn:            "aggregatetype",
		TopicRegex:               "(?<routedByValue>.*)",
		TopicReplacement:         "outbox.event.${routedByValue}",
		JSONPayloadNullBehavior:  "ignore",
		OpInvalidBehavior:        "warn",
		TracingSpanContextColumn: "tracingspancontext",
		ExtendedHeaders:          true,
		TaskID:                   "0",
		KeyConverter:             ConverterConfig{Kind: JSONConverter, SchemasEnable: true},
		ValueConverter:           ConverterConfig{Kind: JSONConverter, SchemasEnable: true},
	}
}
