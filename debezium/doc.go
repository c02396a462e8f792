// Package debezium reads a Kafka Connect configuration of Debezium's
// Postgres connector with the outbox EventRouter transform (a connector
// .properties file, or the JSON Connect's REST API takes, and optionally
// the worker's .properties) and translates it into walbox's settings.
//
// Every key is accounted for: it maps to a walbox setting, is accepted
// with a warning when it has no effect on the records walbox produces, or
// is unsupported; all unsupported keys are reported together in one
// *UnsupportedError, so that a user fixes them in one go. Nothing is
// silently ignored.
//
// The package also reads the offsets Kafka Connect stored for the
// connector (standalone's offsets file, a Java-serialized HashMap, or a
// distributed cluster's offsets topic), for `walbox migrate-from-debezium`.
package debezium
