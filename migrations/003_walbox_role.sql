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
-- No password is set here, so none ends up in version control. Set one
-- from your secret store, e.g. in psql:
--   \password walbox
-- or ALTER ROLE walbox PASSWORD '...'; or use certificate authentication.
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
