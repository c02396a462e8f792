// Package bench measures walbox against the references it has to beat: a
// minimal logical-replication consumer (the ceiling, ceiling.go) and the
// polling relay teams run today (pollrelay.go). cmd/walbox-bench drives it.
//
// Every scenario runs against one throwaway Postgres (internal/pgtest) and
// one broker (a real Kafka broker from internal/kafkatest when java and mvn
// are available, else kfake in-process), one relay at a time, on an outbox
// table that has what both kinds of relay need: an ordered bigint id (the
// poll relay orders by it) and a nullable sent_at with a partial index on the
// pending rows (walbox ignores both).
//
// The scenarios:
//   - Backlog drain: rows written while the relay is stopped, then the time
//     until every event is acknowledged by Kafka and, for walbox, the slot is
//     confirmed past the last commit.
//   - Steady load: a writer commits at a fixed rate; latency per event from
//     the writer's commit returning to a consumer receiving it, joined on the
//     event id.
//   - Large transaction: one transaction of many rows, drained by walbox run
//     as its own process so its peak RSS (VmHWM) can be read.
//   - Foreign bulk UPDATE and large transaction written live (live.go):
//     walbox runs while a table outside the publication is updated in one
//     transaction with outbox events around it, or while one large outbox
//     transaction is written; how long events wait behind it.
//   - Server-side decoding (slotstats.go): the spill and stream figures of
//     every slot-based run, from pg_stat_replication_slots.
//   - Database cost: WAL bytes, tuple updates and Postgres CPU per event.
//
// Nothing here is safe for concurrent use unless it says so: the runner
// drives one scenario at a time.
package bench
