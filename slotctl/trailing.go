package slotctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// How walbox recognises its own trailing slot. Postgres keeps no comment
// or owner on a slot, and walbox writes nothing about it, so the slot's
// history as Postgres records it decides. walbox creates the trailing slot
// as a copy of the live slot and afterwards only moves it with
// pg_replication_slot_advance, capped at the live slot; walbox replay and
// slotctl's counting decode temporary copies of it, never the slot itself.
// So a slot walbox made
//
//   - was never decoded to a client: pg_stat_replication_slots counts no
//     transaction for it (an advance fast-forwards without an output plugin
//     and counts none), and
//   - is not ahead of the live slot's confirmed position.
//
// Another consumer's slot fails the first as soon as that consumer read
// one transaction from it, and usually the second. What this cannot tell:
// a foreign slot that nobody read yet and that sits behind the live slot,
// or one whose statistics were lost (a crash, pg_stat_reset). A trailing
// slot of today's walbox passes: earlier versions treated it the same way.

// DecodedTransactions is how many transactions the server decoded from
// the slot named slot to a client (pg_stat_replication_slots: total_txns,
// spill_txns and stream_txns; PostgreSQL 14+): 0 for a slot only ever
// moved with pg_replication_slot_advance or copied, and for one whose
// statistics were lost (a crash) or reset. A missing slot is 0.
func DecodedTransactions(ctx context.Context, conn Querier, slot string) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `
SELECT COALESCE((SELECT st.total_txns + st.spill_txns + st.stream_txns FROM pg_stat_replication_slots st WHERE st.slot_name = $1), 0)`,
		slot).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("slotctl: read the statistics of slot %q: %w", slot, err)
	}
	return n, nil
}

// TrailingLive returns the live slot a slot of the name trailing would
// trail by walbox's convention ("<live>_replay"), and false for a name
// without the suffix.
func TrailingLive(trailing string) (string, bool) {
	live, ok := strings.CutSuffix(trailing, ReplaySuffix)
	return live, ok && live != ""
}

// CheckTrailing says whether the existing slot named trailing may be
// walbox's trailing slot of the live slot named live (see above): nil if
// so, ErrNotTrailing saying why not and what to do, ErrSlotNotFound if it
// does not exist. The plugin, database and kind are Inspect's to check.
func CheckTrailing(ctx context.Context, conn Querier, live, trailing string) error {
	if err := errors.Join(ValidateSlotName(live), ValidateSlotName(trailing)); err != nil {
		return err
	}
	var (
		confirmed, liveConfirmed *string
		decoded                  int64
	)
	// pg_stat_replication_slots exists from PostgreSQL 14 on, which walbox
	// requires. A slot it has no row for was decoded by nobody.
	err := conn.QueryRow(ctx, `
SELECT tr.confirmed_flush_lsn::text,
       (SELECT l.confirmed_flush_lsn::text FROM pg_replication_slots l WHERE l.slot_name = $1),
       COALESCE((SELECT st.total_txns + st.spill_txns + st.stream_txns FROM pg_stat_replication_slots st WHERE st.slot_name = $2), 0)
FROM pg_replication_slots tr
WHERE tr.slot_name = $2`, live, trailing).Scan(&confirmed, &liveConfirmed, &decoded)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: slot %q does not exist", ErrSlotNotFound, trailing)
	}
	if err != nil {
		return fmt.Errorf("slotctl: read slot %q: %w", trailing, err)
	}
	const fix = "walbox creates its trailing slot as a copy of the live slot and never reads from it, so this is another consumer's slot " +
		"(or one walbox made that someone then read from); give --replay-slot another name, or, if nothing needs it, drop it (`slotctl drop --slot %s`) and walbox creates its own"
	if decoded > 0 {
		return fmt.Errorf("%w: slot %q has been decoded by a client (pg_stat_replication_slots counts %d transaction(s) for it): "+fix+
			"; if you are sure it is walbox's trailing slot and only you read it by hand, clear that record with SELECT pg_stat_reset_replication_slot('%s')",
			ErrNotTrailing, trailing, decoded, trailing, trailing)
	}
	if confirmed != nil && liveConfirmed != nil {
		tr, err1 := parseLSN(*confirmed)
		lv, err2 := parseLSN(*liveConfirmed)
		if err1 == nil && err2 == nil && tr > lv {
			return fmt.Errorf("%w: slot %q is confirmed up to %s, ahead of the live slot %q at %s, so it does not trail it: "+fix,
				ErrNotTrailing, trailing, tr, live, lv, trailing)
		}
	}
	return nil
}

// UnusedTrailingSlot is a trailing slot walbox made and no longer uses,
// as UnusedTrailing finds it.
type UnusedTrailingSlot struct {
	SlotInfo
	// Trails is the live slot it trailed; LiveExists says whether that
	// slot still exists (false: an orphan).
	Trails     string
	LiveExists bool
}

// UnusedTrailing returns the trailing slots of the current database that
// walbox, configured with cfg and keeping the trailing slot inUse ("" when
// --replay-window is off), does not use: pgoutput slots named
// "<name>_replay" that walbox may have made (CheckTrailing) where <name> is
// cfg.Slot or no longer exists. Nothing advances them, so they hold WAL
// and vacuum's catalog horizon until dropped. Active slots (something
// uses them) and trailing slots of other live slots that exist (another
// walbox's) are left out. Changes nothing.
func UnusedTrailing(ctx context.Context, conn Querier, cfg Config, inUse string) ([]UnusedTrailingSlot, error) {
	cfg = cfg.WithDefaults()
	rows, err := conn.Query(ctx, `
SELECT s.slot_name::text,
       EXISTS (SELECT 1 FROM pg_replication_slots l
               WHERE l.slot_name::text = left(s.slot_name::text, -length($1)) AND l.database = s.database)
FROM pg_replication_slots s
WHERE s.slot_type = 'logical' AND s.database = current_database() AND s.plugin = $2 AND NOT s.active
  AND right(s.slot_name::text, length($1)) = $1
ORDER BY s.slot_name`, ReplaySuffix, Plugin)
	if err != nil {
		return nil, fmt.Errorf("slotctl: list slots: %w", err)
	}
	type found struct {
		name   string
		exists bool
	}
	candidates, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (found, error) {
		var f found
		return f, r.Scan(&f.name, &f.exists)
	})
	if err != nil {
		return nil, fmt.Errorf("slotctl: list slots: %w", err)
	}
	var out []UnusedTrailingSlot
	for _, c := range candidates {
		live, ok := TrailingLive(c.name)
		if !ok || c.name == inUse || (c.exists && live != cfg.Slot) {
			continue
		}
		err := CheckTrailing(ctx, conn, live, c.name)
		switch {
		case errors.Is(err, ErrNotTrailing), errors.Is(err, ErrSlotNotFound):
			continue
		case err != nil:
			return nil, err
		}
		s, err := Inspect(ctx, conn, c.name)
		switch {
		case errors.Is(err, ErrSlotNotFound):
			continue
		case err != nil:
			return nil, err
		}
		out = append(out, UnusedTrailingSlot{SlotInfo: s, Trails: live, LiveExists: c.exists})
	}
	return out, nil
}

// Warning is the log message about u, with its fix.
func (u UnusedTrailingSlot) Warning() string {
	why := fmt.Sprintf("walbox no longer uses the trailing replay slot %s of slot %s (--replay-window is off, or --replay-slot names another)", u.Name, u.Trails)
	if !u.LiveExists {
		why = fmt.Sprintf("walbox no longer uses the trailing replay slot %s: its live slot %s no longer exists (a rollback to the polling relay, a cutover to a new slot, a --slot rename)", u.Name, u.Trails)
	}
	return why + "; nothing advances it, so it holds WAL and holds back vacuum of the catalog until dropped: " +
		"if you no longer need to replay from it, drop it with `slotctl drop --slot " + u.Name + "`"
}
