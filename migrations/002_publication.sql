-- 002_publication.sql: the publication walbox streams (pgoutput reads it).
--
-- Run as the owner of public.outbox (or a superuser): PostgreSQL lets only
-- the table's owner put it in a publication, and the least-privilege walbox
-- role of 003_walbox_role.sql does not own it, so it cannot do this itself.
-- (Connected as the owner, `walbox run` and `slotctl create` create it when
-- missing.)
--
-- Apply it BEFORE the replication slot is created: pgoutput fails
-- ("publication does not exist") on changes written before the publication
-- existed. Then create the slot with `slotctl create` (as the walbox role),
-- or start walbox once with --create-slot: walbox creates a missing slot by
-- itself only when it also created the publication, since a slot missing
-- under an existing publication has usually vanished (failover, DROP) and
-- a new one would silently skip the events committed meanwhile.
--
-- publish = 'insert': walbox relays inserts only; updates, deletes (such as
-- the retention cleanup of 001_outbox.sql) and truncates stay out of the
-- stream. The publication must contain only the outbox table, without row
-- filter or column list; walbox checks this on start and says what differs.
-- If public.outbox is partitioned, add publish_via_partition_root = true to
-- the WITH list so rows arrive under the outbox's name.
--
-- Idempotent: CREATE PUBLICATION has no IF NOT EXISTS, hence the DO block.
-- An existing publication of that name is left as it is.

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'walbox') THEN
        CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert');
    END IF;
END
$$;
