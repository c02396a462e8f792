-- Adds source to the key of the inbox (package github.com/walbox/walbox/inbox):
-- rows become unique by (consumer, source, event_id), so a consumer reading
-- two origins whose ids coincide (two outbox tables with BIGSERIAL ids) can
-- keep them apart with inbox.Config.Source. Apply it after 001_inbox.sql, as
-- the table's owner:
--
--   psql "$CONSUMER_DSN" -v ON_ERROR_STOP=1 -f inbox/migrations/002_inbox_source.sql
--
-- or call inbox.Migrate, which runs every file in order with the configured
-- table name in place of public.walbox_inbox. Idempotent: on a table that
-- already has source in its key it changes nothing.
--
-- Existing rows get source '' (the default source, which is what an Inbox
-- without Config.Source uses), so every event they record stays applied.
--
-- Upgrading a table in use: the new key is built as a unique index under
-- an ACCESS EXCLUSIVE lock on the table, which blocks consumers for as long
-- as the build takes (seconds per million rows). Consumers of the previous
-- version fail on their next record once this ran (their ON CONFLICT names
-- the old key) without applying anything; stop them, run this, start the
-- new version. A consumer of this version refuses to work on a table
-- without it, naming this file.
ALTER TABLE public.walbox_inbox ADD COLUMN IF NOT EXISTS source text NOT NULL DEFAULT '';

DO $walbox_inbox_002$
DECLARE
    pk name;
BEGIN
    IF EXISTS (
        SELECT 1
          FROM pg_constraint c
          JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
         WHERE c.conrelid = 'public.walbox_inbox'::regclass AND c.contype = 'p' AND a.attname = 'source'
    ) THEN
        RETURN;
    END IF;
    SELECT c.conname INTO pk
      FROM pg_constraint c
     WHERE c.conrelid = 'public.walbox_inbox'::regclass AND c.contype = 'p';
    IF pk IS NOT NULL THEN
        EXECUTE format('ALTER TABLE %s DROP CONSTRAINT %I', 'public.walbox_inbox'::regclass, pk);
    END IF;
    EXECUTE format('ALTER TABLE %s ADD PRIMARY KEY (consumer, source, event_id)', 'public.walbox_inbox'::regclass);
END
$walbox_inbox_002$;
