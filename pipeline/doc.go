// Package pipeline is walbox's relay: it streams a pgoutput replication slot,
// routes each outbox INSERT to a Kafka record, produces it, and confirms the
// slot only up to the transactions Kafka has fully acknowledged.
//
// One goroutine owns the replication connection: every receive and every
// standby status update happens in Relay's loop, whose receive deadline is the
// next status time. franz-go's promise callbacks only decrement counters
// (checkpoint.Txn.Ack, the in-flight limiter) and mark records acknowledged,
// so the loop never waits on a lock held by the producer.
//
// The loop reads the stream and keeps the window; three parts decide,
// called at fixed points: the delivery mode (delivery.go: atLeastOnce, or
// exactly once in eos*.go), streaming (stream.go: the spool and the
// protocol-1 fallback) and failover (failover.go: the server's identity
// and history, where to resume, what a failover erased). docs/layout.md
// names every file and who calls whom.
//
// Backpressure is walbox's own: the loop stops reading WAL when too many
// records or bytes are unacknowledged, but keeps sending status updates while
// it waits, so a slow or unreachable Kafka never gets the replication
// connection killed by wal_sender_timeout.
package pipeline
