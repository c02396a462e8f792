// Package eventrouter produces, for an outbox row, the Kafka record that
// Debezium's Postgres connector with the io.debezium.transforms.outbox.EventRouter
// transform and the configured converters would produce: same topic, key
// bytes, value bytes, headers and timestamp, so that consumers cannot tell
// walbox in Debezium mode from Debezium.
package eventrouter
