-- The inbox of a consumer that applies walbox's events to its own PostgreSQL
-- database (package github.com/walbox/walbox/inbox). Apply it once to the
-- consumer's database, as the role that should own the table:
--
--   psql "$CONSUMER_DSN" -v ON_ERROR_STOP=1 -f inbox/migrations/001_inbox.sql
--
-- or call inbox.Migrate, which runs this file with the configured table name
-- in place of public.walbox_inbox (and the index named after that table).
-- Idempotent: running it again changes nothing.
--
-- One row per event a consumer has applied. The primary key is what makes a
-- second delivery of the same event a no-op: Handle inserts the row with
-- ON CONFLICT DO NOTHING in the same transaction as the event's effect.
-- topic, kafka_partition and kafka_offset say where the first applied copy
-- came from (for debugging only). received_at drives the cleanup.
CREATE TABLE IF NOT EXISTS public.walbox_inbox (
    consumer        text        NOT NULL,
    event_id        text        NOT NULL,
    received_at     timestamptz NOT NULL DEFAULT now(),
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    kafka_offset    bigint      NOT NULL,
    PRIMARY KEY (consumer, event_id)
);

-- Cleanup deletes a consumer's rows older than its retention, oldest first,
-- in batches.
CREATE INDEX IF NOT EXISTS walbox_inbox_received_at_idx
    ON public.walbox_inbox (consumer, received_at);
