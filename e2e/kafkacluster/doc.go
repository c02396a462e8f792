// Package kafkacluster runs the built walbox binary against a three-node
// Kafka KRaft cluster (internal/kafkatest.Cluster: replication factor 3,
// min.insync.replicas=2 everywhere) under a steady writer, and faults the
// cluster as production sees it: a rolling restart of every broker, SIGKILL
// of the partition leader and of the transaction coordinator, two of three
// brokers frozen for 20 s, a controller failover. An independent
// read_committed consumer checks that every committed row arrived, in
// per-key order, with no duplicates in exactly-once mode, and measures the
// commit-to-consumer latency. Full run only (WALBOX_TEST_FULL=1); its own
// package so that it runs beside e2e and pipeline. Everything lives in
// _test.go files; this file only names the package.
package kafkacluster
