package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/slotctl"
)

// Publication is the publication every slot-based relay streams.
const Publication = "walbox"

// ddl is the outbox of every run: the classic shape with an ordered bigint
// id and sent_at, plus the partial index a polling relay needs to find
// pending rows. walbox reads only inserts and ignores sent_at and the index;
// the writer pays for the index in every run alike.
const ddl = `
CREATE TABLE IF NOT EXISTS public.outbox (
    id             bigserial   PRIMARY KEY,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now(),
    sent_at        timestamptz NULL
);
CREATE INDEX IF NOT EXISTS outbox_pending ON public.outbox (id) WHERE sent_at IS NULL;
`

func slotConfig(slot string) slotctl.Config {
	return slotctl.Config{Table: "public.outbox", Slot: slot, Publication: Publication, CreateMissing: true}
}

// PrepareSchema creates the outbox table and the publication.
func (e *Env) PrepareSchema(ctx context.Context) error {
	conn, err := e.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, ddl); err != nil {
		return fmt.Errorf("create outbox: %w", err)
	}
	return slotctl.EnsurePublication(ctx, conn, slotConfig("walbox"))
}

// ResetOutbox empties the outbox and drops every replication slot, so a run
// starts from an empty table and retains no WAL for an earlier one. The
// table keeps its publication membership and cumulative statistics (runs
// take deltas). Event ids are never reused across runs.
func (e *Env) ResetOutbox(ctx context.Context) error {
	if err := e.dropSlots(ctx); err != nil {
		return err
	}
	conn, err := e.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `TRUNCATE public.outbox`); err != nil {
		return fmt.Errorf("truncate outbox: %w", err)
	}
	// A checkpoint now rather than in the middle of a measurement.
	if _, err := conn.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// dropSlots drops every replication slot, so no WAL is retained for runs
// that are over.
func (e *Env) dropSlots(ctx context.Context) error {
	conn, err := e.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT slot_name::text FROM pg_replication_slots`)
	if err != nil {
		return err
	}
	slots, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	for _, s := range slots {
		if err := e.dropSlot(ctx, conn, s); err != nil {
			return err
		}
	}
	return nil
}

// dropSlot drops a slot, waiting briefly for a walsender that is still
// exiting to release it.
func (e *Env) dropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := slotctl.DropSlot(ctx, conn, slot)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// CreateSlot creates a logical slot (pgoutput) for the outbox publication and
// returns its starting position.
func (e *Env) CreateSlot(ctx context.Context, slot string) (pglogrepl.LSN, error) {
	conn, err := e.Connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	info, err := slotctl.EnsureSlot(ctx, conn, slotConfig(slot))
	if err != nil {
		return 0, err
	}
	return info.ConfirmedFlushLSN, nil
}

// dbSnap is the database's counters at one moment.
type dbSnap struct {
	wal      pglogrepl.LSN // pg_current_wal_insert_lsn()
	tupUpd   int64         // n_tup_upd of the outbox
	pgCPU    time.Duration
	cpuError error
}

// snapshot reads the counters. WAL volume is taken from the insert position
// rather than pg_stat_wal.wal_bytes: both count the same bytes, but backends
// publish their pg_stat_wal share only at most once a second (and idle ones
// only after ten), so deltas of the view lag, while the insert LSN is exact
// at once. Tuple counts are read after the relay's connections are closed,
// when the exiting backends have flushed their statistics.
func (e *Env) snapshot(ctx context.Context) (dbSnap, error) {
	conn, err := e.Connect(ctx)
	if err != nil {
		return dbSnap{}, err
	}
	defer conn.Close(context.Background())
	var s dbSnap
	err = conn.QueryRow(ctx, `
SELECT pg_current_wal_insert_lsn(),
       COALESCE((SELECT n_tup_upd FROM pg_stat_user_tables WHERE relid = 'public.outbox'::regclass), 0)`,
	).Scan(&s.wal, &s.tupUpd)
	if err != nil {
		return s, fmt.Errorf("read database counters: %w", err)
	}
	s.pgCPU, s.cpuError = e.pgCPU()
	return s, nil
}

// flushStats waits for backends that just exited to have their statistics
// visible. Exiting backends flush on exit; the sleep covers the postmaster
// reaping them (their CPU moves into its cutime only then).
func flushStats() { time.Sleep(300 * time.Millisecond) }

// currentLSN returns pg_current_wal_lsn(): after a writer's last commit
// returned, a slot confirmed at or past it has every event committed before.
func (e *Env) currentLSN(ctx context.Context) (pglogrepl.LSN, error) {
	conn, err := e.Connect(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Close(context.Background())
	var lsn pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&lsn); err != nil {
		return 0, err
	}
	return lsn, nil
}
