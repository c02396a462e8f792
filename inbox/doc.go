// Package inbox applies each Kafka event once to a consumer's own PostgreSQL
// database, even when Kafka delivers it twice.
//
// walbox's default delivery is at least once: after a crash it sends again
// what was in flight, and a consumer that crashes between applying a record
// and committing its offset reads it again. With `--delivery exactly-once`
// walbox itself sends no duplicates to read_committed consumers, but a
// consumer that writes to its own database still commits its offsets
// separately from that database and re-reads records after a crash or a
// rebalance. The inbox closes that gap: it records the event's id in an
// inbox table inside the same database transaction as the event's effect,
// so the effect and "this event was applied" commit together or not at all.
//
// Usage:
//
//	ib, err := inbox.New(inbox.Config{Consumer: "billing"})
//	...
//	applied, err := ib.Process(ctx, db, rec, func(ctx context.Context, tx pgx.Tx) error {
//		_, err := tx.Exec(ctx, `UPDATE account SET balance = balance + $1 WHERE id = $2`, amount, id)
//		return err
//	})
//
// Handle does the same inside a transaction the caller already has (for
// example to apply a whole poll of records in one transaction).
//
// # The event id
//
// The id comes from a record header: `event_id` by default (walbox's default
// header, the outbox row's id), or another name with Config.Header, such as
// `id` for walbox's Debezium-compatible records. A record without it, or with
// an empty one, is refused with ErrMissingEventID naming the record's topic,
// partition and offset: it cannot be deduplicated, and applying it silently
// could apply it twice.
//
// # Consumers sharing a table
//
// Rows are keyed by (consumer, event id): several services, or several
// consumer groups of one service, can share one inbox table and each applies
// every event once. Use one Consumer name per independent reader of the
// events; two instances of the same consumer group must use the same name.
//
// # Concurrency and isolation
//
// Two transactions that handle the same event at the same time (a rebalance
// hands a partition to another instance mid-record) serialise on the primary
// key: the second INSERT waits until the first transaction ends, then finds
// the row (not applied) if the first committed, or inserts it (applied) if
// the first rolled back. That holds under READ COMMITTED, PostgreSQL's
// default. Under REPEATABLE READ or SERIALIZABLE the second transaction
// fails with a serialization error (SQLSTATE 40001) instead: roll back and
// retry the record, as with any conflict at those levels.
//
// # Table and cleanup
//
// The table is created by migrations/001_inbox.sql (psql) or Migrate, which
// runs the same file with the configured table name. Rows are never needed
// again once no copy of their event can arrive any more; Cleanup deletes a
// consumer's rows older than a retention, in batches. The retention must be
// longer than the longest time after which an event can be delivered again,
// or a late copy finds no row and is applied a second time. Count every way
// a copy can come back: the Kafka topic's retention if consumer offsets may
// ever be reset to the earliest offset, the longest consumer outage or lag
// (records re-read after it), `walbox replay` of a saved range, and a
// re-publish after a vanished slot (see docs/slots.md). When in doubt, keep
// the rows at least as long as the topic keeps the records.
//
// An Inbox is safe for concurrent use; Handle uses the transaction it is
// given, which, like any pgx.Tx, belongs to one goroutine at a time.
package inbox
