// Package eventrouter produces, for an outbox row, the Kafka record that
// Debezium's Postgres connector with the io.debezium.transforms.outbox.EventRouter
// transform and the configured converters would produce: same topic, key
// bytes, value bytes, headers and timestamp, so that consumers cannot tell
// walbox in Debezium mode from Debezium.
//
// The reference is Debezium 3.6 on Kafka Connect 4.x with their defaults
// (decimal.handling.mode=precise, time.precision.mode=adaptive,
// binary.handling.mode=bytes, SimpleHeaderConverter, replace.null.with.default
// and no OpenTelemetry agent). Route follows EventRouterDelegate.apply:
//
//   - headers: __debezium.context.connectorLogicalName, taskId,
//     connectorName ("postgresql") and runId when extended headers are on,
//     then "id", then the header placements in configuration order;
//   - value: the payload column (expanded into a Struct with
//     table.expand.json.payload, as JsonSchemaData infers it), or a Struct of
//     the payload and the envelope placements named
//     "<topic.prefix>.<schema>.<table>.<route-by value>.Value" after the first
//     row with that payload schema; null with route.tombstone.on.empty.payload
//     for a NULL or blank payload;
//   - key: table.field.event.key; topic: route.topic.regex and
//     route.topic.replacement applied to route.by.field (RegexRouter);
//   - timestamp: table.field.event.timestamp, else the processing time;
//   - schemas: each column's Connect schema, optional unless NOT NULL, with
//     its DEFAULT as Debezium parses it (Config.Columns, from LoadColumns,
//     read again on every new Relation message with Config.ReloadColumns),
//     a NULL reading as the default.
//
// Rows Debezium fails its task on are *router.InvalidRowError (or
// dead-letter records with Config.DeadLetterTopic). The differential test
// (expand_java_test.go) runs Debezium's own classes; e2e's
// TestDebeziumRecordsMatch compares with real Debezium record by record.
package eventrouter
