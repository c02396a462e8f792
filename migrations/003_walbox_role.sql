-- 003_walbox_role.sql: a least-privilege role for walbox.
--
-- Run as a superuser (only a superuser may grant REPLICATION) in the
-- database that holds the outbox. Idempotent.
--
-- walbox needs:
--   * LOGIN, and REPLICATION to create its logical replication slot and
--     stream from it. Mind that REPLICATION is a strong privilege: such a
--     role may also open physical replication connections, which copy the
--     whole cluster. Do not reuse the role for anything else, and allow it
--     in pg_hba.conf only from where walbox runs. (A logical replication
--     connection is matched in pg_hba.conf by its database name, not by the
--     `replication` keyword, which covers physical replication only.)
--   * SELECT on the outbox (checked on start), and USAGE on its schema.
-- It does not need to own the table or to create anything in the database:
-- the publication, which requires table ownership, is created by an admin
-- with 002_publication.sql.
--
-- No password is set here, so none ends up in version control. walbox
-- cannot log in until the role has one (where pg_hba.conf asks for a
-- password, as it should). Set it once, as a superuser, with your own
-- password in place of secret:
--   psql "$SUPERUSER_DSN" -c "ALTER ROLE walbox PASSWORD 'secret'"
-- (or, to keep it out of the shell history, \password walbox in psql),
-- and give it to walbox and slotctl in the DSN,
-- postgres://walbox:secret@HOST:5432/DB, or in a password file
-- (passfile= in the DSN, or PGPASSFILE). Or use certificate authentication.
-- On Amazon RDS/Aurora, replace REPLICATION by: GRANT rds_replication TO walbox;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'walbox') THEN
        CREATE ROLE walbox LOGIN REPLICATION;
    END IF;
END
$$;

-- Also when the role already existed.
ALTER ROLE walbox LOGIN REPLICATION;

GRANT USAGE ON SCHEMA public TO walbox;
GRANT SELECT ON TABLE public.outbox TO walbox;
