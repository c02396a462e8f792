// Package checkpoint decides which WAL position walbox may confirm to
// Postgres.
//
// Confirming a position tells the server it may discard the WAL before it and
// that the slot will never send those transactions again. Confirm one byte too
// far and a crash loses every event that was still in flight; so the tracker
// only ever confirms the end LSN of a transaction that, together with every
// transaction before it, has been fully acknowledged by Kafka. Kafka acks come
// back out of order across partitions, which is why a plain "highest acked
// LSN" is wrong.
//
// The replication loop owns the Tracker; the only thing other goroutines touch
// is Txn.Ack, which is a single atomic decrement, so the producer's callbacks
// never contend on a lock with the loop.
package checkpoint
