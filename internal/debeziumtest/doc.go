// Package debeziumtest runs real Debezium for walbox's tests and benchmark:
// Debezium's Postgres connector with the Outbox Event Router inside Kafka
// Connect standalone (org.apache.kafka.connect.cli.ConnectStandalone), next
// to a broker from internal/kafkatest and a server from internal/pgtest.
//
// The jars come from Maven: e2e/debezium/pom.xml names connect-runtime and
// connect-json at the broker's Kafka version, debezium-connector-postgres
// and a log4j2 binding, and kafkatest.ResolveClasspath resolves and caches
// the classpath (cache file debezium-<kafka version>.classpath next to the
// broker's). A first resolution with an empty ~/.m2 downloads about 30 MB.
//
// Start writes the worker and connector properties (the connector's merged
// over DefaultConnectorProperties, so a comparison test can hand the same
// file to walbox's --debezium-config), starts the JVM in its own process
// group with a parent-death signal, and waits until the connector's task is
// RUNNING according to Connect's REST API and a walsender streams its slot,
// so that every row committed after Start returns is streamed. Stop ends it
// gracefully (Connect flushes source offsets on the way out); Kill crashes
// it, and a Restart then resends what was not flushed.
//
// Tests call StartT: where java or mvn are missing the test is skipped,
// unless WALBOX_REQUIRE_INTEGRATION=1 (CI), which makes it fail.
package debeziumtest
