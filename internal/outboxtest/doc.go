// Package outboxtest writes outbox events into Postgres, reads them back from
// Kafka and compares the two. The integration tests, the crash and fault
// suites, the demo and the benchmark share it so that "nothing lost, order
// per aggregate kept" is checked the same way everywhere.
package outboxtest
