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
// Usage, a whole poll in one transaction (the code of the package's Example,
// which internal/doccheck compares with this):
//
//	ib, err := inbox.New(inbox.Config{Consumer: "billing"}) // header event_id, table public.walbox_inbox
//	if err != nil {
//		log.Fatal(err)
//	}
//	if err := ib.Migrate(ctx, db); err != nil { // or psql -f each of inbox/migrations/*.sql, in order
//		log.Fatal(err)
//	}
//	cl, err := kgo.NewClient(
//		kgo.SeedBrokers("kafka:9092"),
//		kgo.ConsumerGroup("billing"),
//		kgo.ConsumeTopics("outbox.event.order"),
//		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // with walbox --delivery exactly-once
//		// Offsets are committed by CommitRecords below, only after
//		// ProcessBatch's COMMIT: franz-go's default autocommit would
//		// also commit those of a batch that failed.
//		kgo.DisableAutoCommit(),
//	)
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer cl.Close()
//	for {
//		fetches := cl.PollFetches(ctx)
//		if err := fetches.Err0(); err != nil {
//			log.Fatal(err)
//		}
//		recs := fetches.Records() // a whole poll in one database transaction
//		applied, err := ib.ProcessBatch(ctx, db, recs, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
//			var order struct {
//				Customer   string `json:"customer"`
//				TotalCents int64  `json:"total_cents"`
//			}
//			if err := json.Unmarshal(rec.Value, &order); err != nil {
//				return err
//			}
//			_, err := tx.Exec(ctx, `UPDATE balance SET cents = cents - $1 WHERE customer = $2`, order.TotalCents, order.Customer)
//			return err
//		})
//		var failed *inbox.HandlerError
//		switch {
//		case errors.Is(err, inbox.ErrMissingEventID):
//			// Not a record the inbox can deduplicate (see the package
//			// documentation): fix the producer or Config.Header. Stopping
//			// here keeps its offset uncommitted, never skipped.
//			log.Fatal(err)
//		case errors.As(err, &failed):
//			// Nothing of the poll committed. Restart without committing
//			// (never poll on: the next batch's commit would cover this
//			// one): the records come again, from the first, and the inbox
//			// applies each at most once. (A record that can never succeed
//			// needs a decision of its own, such as a dead-letter table.)
//			log.Fatalf("offset %d: %v", failed.Record.Offset, err)
//		case err != nil:
//			// Nothing committed (or, on a commit lost with the connection,
//			// perhaps all of it): restart, as above.
//			log.Fatal(err)
//		}
//		log.Printf("%d records, %d applied now", len(recs), count(applied))
//		// Only now, after ProcessBatch's COMMIT.
//		if err := cl.CommitRecords(ctx, recs...); err != nil {
//			log.Fatal(err)
//		}
//	}
//
// ProcessBatch records every id of the batch with one INSERT … ON CONFLICT
// DO NOTHING, calls the handler only for the events that were new, and
// commits. It takes no savepoint per record: a subtransaction per record
// (more than 64 in one transaction) would overflow the backend's
// subtransaction cache and slow every other session of the database through
// pg_subtrans. Process does the same for one record; HandleBatch and Handle
// work inside a transaction the caller already has.
//
// # When the offsets may be committed
//
// Only after the transaction that holds the inbox rows committed: after
// Process or ProcessBatch returned nil on a connection or a pool, after the
// caller's own COMMIT returned nil with Handle or HandleBatch. Process and
// ProcessBatch given a pgx.Tx begin only a savepoint of it: their "commit"
// releases the savepoint, and the outer transaction can still roll back,
// taking the inbox rows and the effects with it; commit the offsets after
// the outer COMMIT. Committing offsets earlier loses the events of a
// transaction that then rolls back.
//
// # When a handler fails
//
// The ids of the whole batch are recorded before the first handler runs.
// When a handler fails (an error or a panic), the ids of that record and of
// the records after it are in the transaction, and the handler may have
// done part of its work. So the failure aborts the transaction: any later
// statement in it fails, and its Commit commits nothing (pgx reports
// pgx.ErrTxCommitRollback). The caller cannot commit past a failed record:
// roll the transaction back and have the batch delivered again from its
// first record (seek back, or restart without committing the offsets); the
// inbox skips what an earlier commit applied. The error is a *HandlerError
// naming the record; to get past a record whose handler can never succeed,
// deal with it on its own (a dead-letter table, say) in a transaction of
// its own, then process the others without it.
//
// # The event id and its uniqueness
//
// The id comes from a record header: `event_id` by default (walbox's default
// header, the outbox row's id column), or another name with Config.Header,
// such as `id` for walbox's Debezium-compatible records. Rows are keyed by
// (consumer, source, event id): an event is skipped when an event with the
// same id and source was applied by the same consumer before.
//
// So event ids must be unique across everything one Consumer reads with
// one source. walbox's default id is the outbox row's id, unique within one
// outbox table: a consumer that reads the events of two outbox tables (two
// services, two databases, a table rebuilt with its sequence restarted)
// whose ids can coincide must give each its own source with Config.Source,
// for example by topic (SourceTopic) when each topic carries one table's
// events, unless the ids are globally unique (UUIDs). Without a Source all
// records share the source "", and the second of two events sharing an id
// is skipped as applied. The source must be the same for every copy of an
// event: a copy that arrives on another topic (re-published or replayed
// elsewhere) is applied again under SourceTopic.
//
// # Records the inbox refuses
//
// A record whose id is missing or empty, that carries the header several
// times with different values, or whose id is not text PostgreSQL can store
// (a NUL byte or invalid UTF-8, such as a UUID sent as 16 raw bytes; turn
// it into text, hex say, in rec.Headers before handing every copy of the
// record to the inbox), is refused with ErrMissingEventID
// naming the record's topic, partition and offset, before anything is
// written; in a batch, the whole batch is refused. It is never skipped nor
// applied unguarded: stop, leave its offset uncommitted, and fix the cause.
// walbox emits two such records:
//
//   - A row whose headers column carries an `event_id` key that differs
//     from its id column: walbox sends the id column's event_id first and
//     the row's headers after it, so the record has two. Fix the writer (no
//     event_id key in the headers column, or the same value). For records
//     already in the topic, decide once which id is the event's and apply
//     the same rule to every copy, on every instance: to keep walbox's, the
//     first, remove the later event_id headers from rec.Headers before
//     handing the record to the inbox.
//   - A row without an id (a table without the id column, or a NULL id):
//     walbox sends no event_id header. Give the outbox an id column (NOT
//     NULL; walbox's columns.id option names it). Records already in the
//     topic have no key to deduplicate by: apply them by hand and commit
//     past them, or, only if walbox ran with `--delivery exactly-once` and
//     the consumer reads read_committed (one copy of each row in Kafka),
//     key them by their position, e.g. a header set to topic/partition/
//     offset under a Source of their own; a replay or re-publish of them
//     is then applied again.
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
// retry the record, as with any conflict at those levels. A batch inserts
// its ids in sorted order, so two batches sharing events wait for each
// other rather than deadlock on the inbox (the handlers' own locks can
// still deadlock: a 40P01 error, retried like 40001).
//
// The wait lasts as long as the first transaction: a former owner frozen
// mid-batch (a paused process, a handler stuck on a remote call) holds
// the rows, and the partition's new owner waits with it. Bound it on the
// consumer's role: idle_in_transaction_session_timeout makes the server
// end a frozen holder's session (its transaction rolls back, its late
// COMMIT fails, and the waiter applies the events), and lock_timeout (or a
// deadline on ctx) bounds the waiter itself (an error: roll back, deliver
// again).
//
// # Table, upgrade and cleanup
//
// The table is created by the files of migrations/ applied in order
// (001_inbox.sql, then 002_inbox_source.sql, with psql) or by Migrate,
// which runs them with the configured table name. A table of the previous
// version (001_inbox.sql only) is upgraded by 002_inbox_source.sql, or by
// Migrate: its rows keep their events applied under the source "". Until
// then the inbox refuses the table, naming the file. The upgrade rebuilds
// the key under a lock that blocks the table for the build, and consumers
// of the previous version fail (without applying anything) once it ran:
// stop them, upgrade, start the new version.
//
// Rows are never needed again once no copy of their event can arrive any
// more; Cleanup deletes a consumer's rows older than a retention, in
// batches. A copy that arrives after its row was deleted is applied a
// second time, silently. Rows are aged from the first applied copy
// (received_at), and a copy can be written to Kafka long after the first
// one and then stay readable for the topic's retention. So the retention
// must be at least
//
//	the longest delay after which another copy of an event can still be
//	written to a topic this consumer reads
//	+ the longest time a copy stays readable there
//	+ a margin (a consumer outage that ends with a re-read)
//
// The delay is the longest of: the replay window, if `walbox replay` may be
// run (--replay-window, plus the time until someone replays); the outbox
// table's retention of published rows, if a re-publish from it may be done
// (after a vanished slot, see docs/slots.md); how long a walbox instance
// that lost the slot may keep running and retrying what it had produced;
// and the time at-least-once walbox takes to send a duplicate after a
// crash (seconds). The readable time is the topic's retention.ms, if
// offsets may ever be reset to the earliest or a new group of the same
// Consumer name starts from the earliest. When one of them is unbounded (a
// compacted or infinitely retained topic read from the start, re-publishes
// from an archive), do not clean up this consumer's rows.
//
// An Inbox is safe for concurrent use; Handle and HandleBatch use the
// transaction they are given, which, like any pgx.Tx, belongs to one
// goroutine at a time.
package inbox
