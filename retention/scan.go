package retention

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/slotctl"
)

// DefaultScanBytes bounds the WAL one recovery step decodes beyond the
// trailing slot's position (Config.ScanBytes).
const DefaultScanBytes = 256 << 20

// scanChanges is how many changes one read of the trailing slot's stream
// decodes at most (pg_logical_slot_peek_binary_changes' upto_nchanges; it
// finishes the transaction that reaches it). A step reads again, after
// advancing, while everything read is older than the window, up to
// ScanBytes: so it decodes about what it skips, not ScanBytes every time.
const scanChanges = 10000

// commitAt is a transaction of the trailing slot's stream: pgoutput's
// Commit message.
type commitAt struct {
	at  time.Time     // commit time (the server's clock)
	end pglogrepl.LSN // end of the commit record: a position to advance to
}

// scanned is what one recovery scan of the trailing slot's stream found.
type scanned struct {
	// commits are the transactions pgoutput sends (the publication's and
	// logical decoding messages, heartbeats included) that commit between
	// the trailing slot's position and upto, in commit order.
	commits []commitAt
	// upto is where the scan ended: the live slot's confirmed position,
	// or ScanBytes past the trailing slot when that is less.
	upto pglogrepl.LSN
	// live is the live slot's confirmed position on the server.
	live pglogrepl.LSN
	// more says the scan stopped at its limit of changes before upto:
	// commits reaches only the last one's end.
	more bool
}

// target returns the position a recovery step advances the trailing slot
// to for the cut (now minus the window): past every transaction of the
// scan committed at or before cut, and, when all of them were, to the end
// of the scan (nothing there is left to replay that the window keeps).
// since is the time from which on everything the slot then holds was
// committed, and current says whether the slot is then where the window
// wants it (false while a scan cut short by ScanBytes has more to read).
func (s scanned) target(cut, now time.Time) (target pglogrepl.LSN, since time.Time, current bool) {
	for _, c := range s.commits {
		if c.at.After(cut) {
			return target, c.at, true
		}
		target, since = c.end, c.at
	}
	switch {
	case s.more:
		return target, since, false
	case s.upto >= s.live:
		return s.upto, now, true
	default:
		return s.upto, since, false
	}
}

// scanSQL peeks the stream of $6, a temporary copy of the trailing slot
// ($2), from its position up to
// LEAST(its position + $3 bytes, the live slot's ($1) confirmed position),
// stopping after the transaction that reaches $5 changes, and returns that
// bound, the number of changes, and the Commit messages only (byte 'C' =
// 67), so that the rows' data stays on the server. Peeking moves nothing,
// but it counts as decoding in pg_stat_replication_slots, by which walbox
// recognises its own trailing slot (never decoded; slotctl.CheckTrailing):
// hence the copy.
// The server decodes from the slot's restart_lsn, as every
// pg_replication_slot_advance does too.
const scanSQL = `
WITH pos AS (
  SELECT LEAST(tr.confirmed_flush_lsn + $3::numeric, live.confirmed_flush_lsn) AS upto, live.confirmed_flush_lsn AS live
  FROM pg_replication_slots live, pg_replication_slots tr
  WHERE live.slot_name = $1 AND tr.slot_name = $2),
ch AS MATERIALIZED (
  SELECT p.lsn, p.data FROM pos, pg_logical_slot_peek_binary_changes($6, pos.upto, $5,
    'proto_version', '1', 'publication_names', $4, 'messages', 'true') p)
SELECT pos.upto::text, pos.live::text, (SELECT count(*) FROM ch), c.data
FROM pos LEFT JOIN (SELECT lsn, data FROM ch WHERE get_byte(data, 0) = 67) c ON true
ORDER BY c.lsn`

// commitLen is the length of pgoutput's Commit message: 'C', flags, commit
// LSN, end LSN, commit time.
const commitLen = 1 + 1 + 8 + 8 + 8

// pgEpoch is where pgoutput's timestamps count from.
var pgEpoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// parseCommit reads a pgoutput Commit message; it never panics.
func parseCommit(data []byte) (commitAt, error) {
	if len(data) != commitLen || data[0] != 'C' {
		return commitAt{}, fmt.Errorf("pgoutput commit message of %d bytes (want %d, starting with 'C')", len(data), commitLen)
	}
	end := pglogrepl.LSN(binary.BigEndian.Uint64(data[10:]))
	us := int64(binary.BigEndian.Uint64(data[18:]))
	return commitAt{end: end, at: pgEpoch.Add(time.Duration(us) * time.Microsecond)}, nil
}

// scan runs scanSQL on a temporary copy of the trailing slot, which it
// drops afterwards (the server drops it with the session anyway, so a
// crash leaves nothing behind). conn must be one session, not a pool.
func scan(ctx context.Context, conn slotctl.Querier, slot, replaySlot, publication string, budget int64, changes int) (s scanned, err error) {
	copyName, drop, err := slotctl.TemporaryCopy(ctx, conn, replaySlot, "walbox_scan")
	if err != nil {
		if isUndefinedObject(err) {
			return scanned{}, fmt.Errorf("read the trailing slot %q's stream: %w", replaySlot, errSlotsGone(slot, replaySlot))
		}
		return scanned{}, fmt.Errorf("read the trailing slot %q's stream: %w", replaySlot, err)
	}
	defer func() {
		if derr := drop(); derr != nil && err == nil {
			err = derr
		}
	}()
	return scanCopy(ctx, conn, slot, replaySlot, copyName, publication, budget, changes)
}

func scanCopy(ctx context.Context, conn slotctl.Querier, slot, replaySlot, copyName, publication string, budget int64, changes int) (scanned, error) {
	rows, err := conn.Query(ctx, scanSQL, slot, replaySlot, budget, publication, changes, copyName)
	if err != nil {
		return scanned{}, fmt.Errorf("read the trailing slot %q's stream: %w", replaySlot, err)
	}
	var s scanned
	n := 0
	for rows.Next() {
		var upto, live string
		var data []byte
		var nchanges int64
		if err := rows.Scan(&upto, &live, &nchanges, &data); err != nil {
			return s, fmt.Errorf("read the trailing slot %q's stream: %w", replaySlot, err)
		}
		if n == 0 {
			if s.upto, err = pglogrepl.ParseLSN(upto); err == nil {
				s.live, err = pglogrepl.ParseLSN(live)
			}
			s.more = nchanges >= int64(changes)
			if err != nil {
				rows.Close()
				return s, fmt.Errorf("read the trailing slot %q's stream: %w", replaySlot, err)
			}
		}
		n++
		if data == nil {
			continue // no transaction (the LEFT JOIN's row)
		}
		c, err := parseCommit(data)
		if err != nil {
			rows.Close()
			return s, fmt.Errorf("read the trailing slot %q's stream: %w", replaySlot, err)
		}
		s.commits = append(s.commits, c)
	}
	if err := rows.Err(); err != nil {
		return s, fmt.Errorf("read the trailing slot %q's stream: %w", replaySlot, err)
	}
	if n == 0 {
		return s, fmt.Errorf("read the trailing slot %q's stream: %w", replaySlot, errSlotsGone(slot, replaySlot))
	}
	return s, nil
}

func errSlotsGone(slot, replaySlot string) error {
	return fmt.Errorf("%w: the trailing slot %q or the live slot %q does not exist", slotctl.ErrSlotNotFound, replaySlot, slot)
}

// pgSlots is the keeper's database: the two slots on one connection.
type pgSlots struct {
	conn                          *pgx.Conn
	slot, replaySlot, publication string
}

func (p pgSlots) advance(ctx context.Context, target pglogrepl.LSN) (Advanced, error) {
	return Advance(ctx, p.conn, p.slot, p.replaySlot, target)
}

func (p pgSlots) scan(ctx context.Context, budget int64, changes int) (scanned, error) {
	if p.publication == "" {
		return scanned{}, errors.New("no publication to read the trailing slot's stream with")
	}
	return scan(ctx, p.conn, p.slot, p.replaySlot, p.publication, budget, changes)
}

// isUndefinedObject reports SQLSTATE 42704, which the server returns for a
// slot that does not exist.
func isUndefinedObject(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42704"
}
