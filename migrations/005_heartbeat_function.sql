-- 005_heartbeat_function.sql: heartbeats without the right to emit events.
--
-- walbox emits a heartbeat every --heartbeat-interval (default 10s): a
-- logical decoding message with the prefix walbox_heartbeat, timed on its
-- way back through the slot. It needs EXECUTE on pg_logical_emit_message,
-- which PostgreSQL grants PUBLIC by default. Once that is revoked (004, for
-- --message-prefix), granting it to walbox's role would let the relay's own
-- credentials emit outbox messages with ids, headers and topics of their
-- choosing. This function is the narrow alternative: it emits only a
-- heartbeat (the prefix is fixed, the content is built here from an
-- instance id of hex digits and a sequence number), runs with its owner's
-- rights (SECURITY DEFINER, search_path pinned), and only walbox's role may
-- execute it. walbox uses it whenever it exists, and calls
-- pg_logical_emit_message directly otherwise.
--
-- Apply it together with 004: without it, 004 stops the heartbeats (walbox
-- logs one ERROR naming this file and keeps running).
--
-- Run as a superuser (the owner must be allowed to execute
-- pg_logical_emit_message; a superuser always is) in the outbox's database,
-- after 003 (walbox's role must exist). Idempotent. The owner is set to the
-- role running this file even if someone else created the function first.
-- For another role name than walbox, edit the GRANT in a copy.

CREATE OR REPLACE FUNCTION public.walbox_heartbeat(instance text, seq bigint)
RETURNS pg_lsn
LANGUAGE plpgsql
VOLATILE
SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $fn$
BEGIN
    IF instance IS NULL OR instance !~ '^[0-9a-f]{1,64}$' OR seq IS NULL OR seq < 0 THEN
        RAISE EXCEPTION 'walbox_heartbeat: instance must be 1 to 64 hex digits and seq a number >= 0';
    END IF;
    RETURN pg_catalog.pg_logical_emit_message(true, 'walbox_heartbeat',
        pg_catalog.json_build_object('instance', instance, 'seq', seq,
            'sent_unix_ns', (extract(epoch FROM pg_catalog.clock_timestamp()) * 1000000000)::bigint)::text);
END
$fn$;

ALTER FUNCTION public.walbox_heartbeat(text, bigint) OWNER TO CURRENT_USER;
REVOKE ALL ON FUNCTION public.walbox_heartbeat(text, bigint) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION public.walbox_heartbeat(text, bigint) TO walbox;
