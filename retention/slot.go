package retention

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/slotctl"
)

// EnsureSlot makes sure the trailing slot replaySlot exists and returns it,
// with created true when this call created it.
//
// A missing trailing slot is created as a copy of the live slot
// (pg_copy_logical_replication_slot): it starts exactly at the live slot's
// confirmed position, with its restart_lsn and catalog_xmin. A slot created
// at "now" would be ahead of the live slot whenever events are in flight,
// and those could never be replayed; the copy covers everything the live
// slot still covers. If walbox dies right after creating it, the next start
// finds it and keeps it (it is then simply older than the window).
//
// An existing slot of that name that is not a persistent pgoutput slot of
// this database, or that walbox did not make (slotctl.CheckTrailing: a
// client decoded it, or it is ahead of the live slot), is ErrSlotMismatch:
// walbox does not touch it. An
// invalidated one is slotctl.ErrSlotLost: it is left for the operator to
// drop (the error says so), and recreated once dropped.
func EnsureSlot(ctx context.Context, conn slotctl.Querier, slot, replaySlot string) (info slotctl.SlotInfo, created bool, err error) {
	info, err = inspectTrailing(ctx, conn, slot, replaySlot)
	if err == nil || !errors.Is(err, slotctl.ErrSlotNotFound) {
		return info, false, err
	}
	_, err = conn.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2)`, slot, replaySlot)
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "42710":
		// Created concurrently (another walbox on the same slots): use it.
	case errors.As(err, &pgErr) && pgErr.Code == "42704":
		return info, false, fmt.Errorf("%w: cannot create trailing slot %q as a copy of slot %q: %v", ErrLiveSlotMissing, replaySlot, slot, err)
	case errors.As(err, &pgErr) && pgErr.Code == "53400":
		return info, false, fmt.Errorf("create trailing slot %q as a copy of slot %q: %w; raise max_replication_slots by one for it", replaySlot, slot, err)
	case err != nil:
		return info, false, fmt.Errorf("create trailing slot %q as a copy of slot %q: %w", replaySlot, slot, err)
	default:
		created = true
	}
	info, err = inspectTrailing(ctx, conn, slot, replaySlot)
	return info, created, err
}

// inspectTrailing reads the trailing slot replaySlot and refuses one that
// is not a persistent pgoutput slot of this database, or an invalidated
// one. With slot (the live slot) set it also refuses a slot walbox did not
// make (slotctl.CheckTrailing): a start's check; the keeper's steps, which
// only read wal_status, pass "".
func inspectTrailing(ctx context.Context, conn slotctl.Querier, slot, replaySlot string) (slotctl.SlotInfo, error) {
	info, err := slotctl.Inspect(ctx, conn, replaySlot)
	if err != nil {
		return info, err
	}
	var db string
	if err := conn.QueryRow(ctx, `SELECT current_database()::text`).Scan(&db); err != nil {
		return info, fmt.Errorf("read the current database: %w", err)
	}
	if info.SlotType != "logical" || info.Plugin != slotctl.Plugin || info.Temporary || info.Database != db {
		return info, fmt.Errorf("%w: slot %q exists but is a %s slot (plugin %q, database %q, temporary %t), not a persistent %s slot of database %q; "+
			"give --replay-slot another name, or drop that slot if it is a leftover",
			ErrSlotMismatch, replaySlot, info.SlotType, info.Plugin, info.Database, info.Temporary, slotctl.Plugin, db)
	}
	if slot != "" {
		if err := slotctl.CheckTrailing(ctx, conn, slot, replaySlot); err != nil {
			return info, fmt.Errorf("%w: %w", ErrSlotMismatch, err)
		}
	}
	if info.WALStatus == "lost" || info.InvalidationReason != "" {
		// Not dropped by walbox: the operator should learn that the
		// window was not kept, and why. Once dropped, the keeper creates
		// a new one by itself.
		return info, fmt.Errorf("%w: trailing slot %q was invalidated (wal_status %q, reason %q), so the window is not replayable; "+
			"drop it (slotctl drop --slot %s) and walbox creates a new one; %s",
			slotctl.ErrSlotLost, replaySlot, info.WALStatus, info.InvalidationReason, replaySlot, LostAdvice(info.InvalidationReason))
	}
	return info, nil
}

// Advanced is what Advance found and did.
type Advanced struct {
	// Before and After are the trailing slot's confirmed position before
	// and after the call; equal when it did not move.
	Before, After pglogrepl.LSN
	// Live is the live slot's confirmed position on the server when the
	// trailing slot was advanced.
	Live pglogrepl.LSN
	// WALStatus is the trailing slot's wal_status before the call (see
	// slotctl.SlotInfo): "lost" once the server invalidated it, and no
	// target moves it then.
	WALStatus string
}

// advanceSQL moves the trailing slot ($2) to LEAST(target $3, the live
// slot's ($1) confirmed position on the server), and only forwards. It is
// one statement, so no interruption can separate the reading of the two
// positions from the move: the cap is what the server itself holds for the
// live slot (a status update walbox sent but the server never received
// does not count), and the live slot only moves forwards, so the cap stays
// valid when the advance happens. pg_replication_slot_advance would refuse
// a backward move; the CASE never asks for one.
const advanceSQL = `
SELECT tr.confirmed_flush_lsn::text, live.confirmed_flush_lsn::text, COALESCE(tr.wal_status, ''),
       CASE WHEN LEAST($3::pg_lsn, live.confirmed_flush_lsn) > tr.confirmed_flush_lsn
            THEN (SELECT a.end_lsn FROM pg_replication_slot_advance($2, LEAST($3::pg_lsn, live.confirmed_flush_lsn)) a)
       END::text
FROM pg_replication_slots live, pg_replication_slots tr
WHERE live.slot_name = $1 AND tr.slot_name = $2`

// Advance moves the trailing slot replaySlot forwards to target, capped at
// the live slot's confirmed position as the server holds it; it never
// moves it backwards. A target at or below the trailing slot's position
// leaves it alone. Both slots must exist.
func Advance(ctx context.Context, conn slotctl.Querier, slot, replaySlot string, target pglogrepl.LSN) (Advanced, error) {
	var before, live string
	var after *string
	var a Advanced
	err := conn.QueryRow(ctx, advanceSQL, slot, replaySlot, target.String()).Scan(&before, &live, &a.WALStatus, &after)
	if errors.Is(err, pgx.ErrNoRows) {
		return Advanced{}, fmt.Errorf("advance trailing slot %q: it or the live slot %q does not exist (a missing trailing slot is created again as a copy of the live slot on the next attempt, "+
			"a few seconds from now, and its window starts again from there)", replaySlot, slot)
	}
	if err != nil {
		return Advanced{}, fmt.Errorf("advance trailing slot %q to %s: %w", replaySlot, target, err)
	}
	if a.Before, err = pglogrepl.ParseLSN(before); err != nil {
		return a, fmt.Errorf("trailing slot %q confirmed_flush_lsn %q: %w", replaySlot, before, err)
	}
	if a.Live, err = pglogrepl.ParseLSN(live); err != nil {
		return a, fmt.Errorf("slot %q confirmed_flush_lsn %q: %w", slot, live, err)
	}
	a.After = a.Before
	if after != nil {
		if a.After, err = pglogrepl.ParseLSN(*after); err != nil {
			return a, fmt.Errorf("trailing slot %q advanced to %q: %w", replaySlot, *after, err)
		}
	}
	return a, nil
}

// matchFailover makes the trailing slot a failover slot when the live one
// is (PostgreSQL 17+), so that a promoted standby has the replay window
// too. pg_copy_logical_replication_slot never copies the failover
// property, and only the replication command ALTER_REPLICATION_SLOT sets
// it: on a replication connection of the keeper's own configuration. A
// trailing slot made by an older walbox is turned into one the same way.
// A failure is logged, not returned: the keeper must go on advancing the
// slot, or it would hold WAL back; the next start tries again.
func (k *Keeper) matchFailover(ctx context.Context, conn slotctl.Querier, trailing slotctl.SlotInfo) {
	if trailing.Failover {
		return
	}
	live, err := slotctl.Inspect(ctx, conn, k.cfg.Slot)
	if err != nil || !live.Failover {
		return // a missing live slot is the relay's to report
	}
	if err := k.alterFailover(ctx); err != nil {
		k.log.Warn("could not make the trailing slot a failover slot like the live slot: after a failover the replay window starts again from the live slot's position",
			"replay_slot", k.cfg.ReplaySlot, "slot", k.cfg.Slot, "err", err)
		return
	}
	k.log.Info("made the trailing slot a failover slot, as the live slot is", "replay_slot", k.cfg.ReplaySlot, "slot", k.cfg.Slot)
}

// alterFailover turns failover on for the trailing slot.
func (k *Keeper) alterFailover(ctx context.Context) error {
	cfg := k.conn.Copy()
	cfg.RuntimeParams["replication"] = "database"
	rc, err := pgconn.ConnectConfig(ctx, &cfg.Config)
	if err != nil {
		return fmt.Errorf("connect for replication: %w", err)
	}
	defer rc.Close(context.Background())
	// Slot names are validated identifiers (lower case, digits, _).
	if err := rc.Exec(ctx, "ALTER_REPLICATION_SLOT "+k.cfg.ReplaySlot+" (FAILOVER true)").Close(); err != nil {
		return fmt.Errorf("ALTER_REPLICATION_SLOT: %w", err)
	}
	return nil
}
