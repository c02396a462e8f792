// Package router turns an inserted outbox row into the Kafka record it stands
// for, the job Debezium's Outbox Event Router transform does.
//
// An outbox row is already an event: the writer chose its payload, its
// aggregate and its type inside the business transaction. The router's job is
// to deliver that decision unchanged, so the payload goes out as the bytes
// Postgres renders for the column (jsonb and json as their text, bytea decoded
// back to the bytes the writer stored), never re-encoded: a consumer must see
// what the writer wrote, and re-encoding per event would cost more than all
// the rest of the routing.
//
// The record key is the aggregate id because Kafka orders only within a
// partition: every event of one aggregate must hash to one partition, and the
// key is what the partitioner hashes. Changing how the key is built moves
// aggregates between partitions and breaks their order across the change.
//
// Headers carry what consumers need without parsing the payload: event_id,
// their dedup key (delivery is at least once), event_type, and the row's own
// headers (correlation ids, traceparent) in the order the document lists them.
//
// A row that cannot be routed (no aggregate id, no payload, headers that are
// not an object, a topic Kafka would refuse) is never dropped. By default
// Route fails, and the pipeline stops before confirming the row's LSN, so the
// row waits in the WAL until the writer is fixed or an operator opts into a
// dead-letter topic, where the row lands with walbox_* headers saying what was
// wrong and where it came from. Silently skipping it would lose an event the
// business transaction committed, which is the one thing an outbox exists to
// prevent.
//
// Column names and the topic template are resolved once per Relation
// message, not per row, and rendered topics and header keys are interned, so
// a steady stream costs a few small allocations per event. Those caches make a
// Router single-goroutine; run one per pipeline.
//
// The table shapes teams run (classic, minimal, Debezium's, event-sourced with
// a topic column, watermill-sql with everything in a metadata column) are all
// expressible with Columns, whose settings may read a JSON key with
// "column->>key" for the last of them.
package router
