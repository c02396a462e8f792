-- 001_outbox.sql: the outbox table that walbox streams to Kafka.
--
-- Applications INSERT one row per event, in the same transaction as the
-- business change it describes. walbox reads those inserts from the WAL
-- through a logical replication slot; it never reads, updates or deletes
-- rows. So there is no sent_at, attempts or error column: an event is sent
-- once walbox has confirmed the slot past the transaction that inserted it.
--
-- Run as the role that should own the table (usually the application's
-- migration role). Idempotent: IF NOT EXISTS throughout.
--
-- Why id is a uuid and not a bigserial:
--   * The id is the event's identity outside this database: walbox sends it
--     as the event_id header and consumers deduplicate on it (an inbox table
--     keyed by event id), often for events of many producers at once. A
--     sequence is unique only within one table, and a sequence recreated by
--     a dump/restore or a table rebuild hands out old numbers again, which
--     consumers then drop as duplicates: silent event loss.
--   * The application can create the id before the INSERT, to log it or
--     return it to its caller.
--   * Order comes from the WAL (commit order), never from the id; sequence
--     values are not in commit order anyway.
-- The cost: the default gen_random_uuid() (built in since PostgreSQL 13) is a
-- random UUIDv4, so inserts land all over the primary-key index. At high
-- rates have the application send time-ordered UUIDv7 ids (or use uuidv7()
-- on PostgreSQL 18+), which index like a sequence.

CREATE TABLE IF NOT EXISTS public.outbox (
    id             uuid        NOT NULL DEFAULT gen_random_uuid(),
    -- Chooses the topic (default template: outbox.event.<aggregate_type>).
    aggregate_type text        NOT NULL,
    -- The Kafka record key: all events of one aggregate land on one
    -- partition, which is what keeps them in order.
    aggregate_id   text        NOT NULL,
    -- Sent as the event_type header.
    event_type     text        NOT NULL,
    -- The record value. Kafka rejects records over its message limit (1 MB
    -- by default): store large documents elsewhere and send a reference.
    payload        jsonb       NOT NULL,
    -- Each top-level key becomes a record header (traceparent, correlation
    -- id, ...); values should be strings.
    headers        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    created_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT outbox_pkey PRIMARY KEY (id),
    CONSTRAINT outbox_headers_is_object CHECK (jsonb_typeof(headers) = 'object')
);

-- For the retention DELETE below.
CREATE INDEX IF NOT EXISTS outbox_created_at_idx ON public.outbox (created_at);

COMMENT ON TABLE public.outbox IS
    'Transactional outbox: insert events in the business transaction; walbox streams the inserts to Kafka and never modifies rows.';

-- Retention and cleanup
--
-- walbox never deletes rows, so the table grows until something does. Keep
-- rows long enough to replay events after an incident (at least 3 days; 7 is
-- a good default) and delete only rows walbox has already streamed, that is,
-- committed before the slot's confirmed_flush_lsn. walbox lags by seconds, so
-- a time-based cutoff of days is enough, provided the slot is not stuck:
-- check first that it has not fallen behind (`slotctl inspect`, or the lag
-- metric) and is not lost. For example, daily, in batches to keep
-- transactions short:
--
--   DELETE FROM public.outbox
--   WHERE id IN (SELECT id FROM public.outbox
--                WHERE created_at < now() - interval '7 days'
--                LIMIT 10000);
--
-- (repeat until it deletes nothing). The publication publishes inserts only,
-- so these deletes never reach Kafka. At very high volume, partition the
-- table by created_at and drop old partitions instead; slotctl then creates
-- the publication with publish_via_partition_root = true.
