-- 004_emit_message_privilege.sql: only the writers' role may emit outbox messages.
--
-- Needed only with walbox's --message-prefix, which routes logical decoding
-- messages emitted with pg_logical_emit_message(true, '<prefix>', '<json>')
-- as events. PostgreSQL lets every role (PUBLIC) execute that function, so
-- any role that can connect to the database could then emit events with
-- ids, headers and (with --column-topic) topics of its choosing. This
-- file revokes EXECUTE from
-- PUBLIC on every overload (PostgreSQL 17 added ones with a flush argument;
-- the loop covers whichever this server has) and grants it to a group role,
-- outbox_writer, created here NOLOGIN if missing.
--
-- Run as a superuser (the functions belong to the bootstrap superuser) in
-- the database that holds the outbox: function privileges are kept per
-- database. Idempotent. Then give the roles that write events the right:
--
--   GRANT outbox_writer TO app;          -- your application's role
--
-- (outbox_writer is a placeholder like the walbox role of 003: rename it in
-- a copy of this file, in both places, to use a role you already have.)
-- Superusers keep the right regardless. Do not grant outbox_writer (or
-- EXECUTE on the function) to walbox's own role: its credentials could then
-- emit events too.
--
-- walbox's heartbeats (--heartbeat-interval, on by default) call the
-- function, so this file alone stops them: apply
-- 005_heartbeat_function.sql with it, which gives walbox a function that
-- can emit only heartbeats. (Without 005, walbox logs one ERROR naming it
-- and keeps running without heartbeats.)
--
-- With --message-prefix, walbox checks on start that PUBLIC cannot execute
-- any overload and refuses to start otherwise, printing this SQL; where it
-- cannot be applied (a managed service that forbids changing pg_catalog
-- privileges), --message-prefix-allow-public accepts the risk with a warning.
--
-- To undo: GRANT EXECUTE ON FUNCTION pg_logical_emit_message(...) TO PUBLIC
-- for each overload (\df pg_logical_emit_message lists them).

DO $$
DECLARE f regprocedure;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'outbox_writer') THEN
        CREATE ROLE outbox_writer NOLOGIN;
    END IF;
    FOR f IN SELECT p.oid::regprocedure FROM pg_proc p
             WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
        EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO outbox_writer', f);
    END LOOP;
END
$$;
