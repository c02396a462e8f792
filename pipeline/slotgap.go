package pipeline

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// A slot moved ahead of walbox. START_REPLICATION at a position before the
// slot's confirmed_flush_lsn makes PostgreSQL start at confirmed_flush_lsn,
// silently: every transaction committed in between is never sent. walbox
// confirms only what Kafka acknowledged (or committed), so when a session
// after the first finds the slot ahead of walbox's own position, and no
// other process held the slot meanwhile, someone else moved it: a slot
// created afresh after a failover (an HA manager's copy made before the
// replica had it), pg_replication_slot_advance, a slot dropped and created
// again, or one restored from elsewhere. walbox cannot send what it never
// received, so stopping would deliver nothing more: it reports the range
// (log, walbox_slot_skipped_wal_bytes_total, /readyz degraded) and streams
// on, as it does for events a failover erased.
//
// Another holder meanwhile is the legitimate case: a --standby peer (or any
// other walbox) streamed the slot and delivered what it confirmed. walbox
// knows of one when a session since the last one that streamed stood by,
// or found the slot active under another backend than its own last
// walsender; in exactly-once mode the state topic also shows what Kafka
// committed, whoever committed it.

// slotGap is the relay's state for the check. Owned by the goroutine
// running Relay.Run, except the reported range (atomics, read by /readyz).
type slotGap struct {
	skippedBytes prometheus.Counter
	// streamed is set once a session of this process streamed: only then
	// is the position walbox's own rather than the slot's.
	streamed bool
	// ownPID is the backend of the last session that streamed.
	ownPID uint32
	// peer is set when, since the last session that streamed, another
	// process may have held the slot.
	peer bool

	// The last range reported, and when (Unix nanoseconds); count is
	// how many were reported since the start.
	from, to atomic.Uint64
	at       atomic.Int64
	count    atomic.Uint64
}

func newSlotGap(reg prometheus.Registerer) *slotGap {
	return &slotGap{skippedBytes: promauto.With(reg).NewCounter(prometheus.CounterOpts{
		Name: "walbox_slot_skipped_wal_bytes_total",
		Help: "Bytes of WAL the server skipped because the slot's confirmed_flush_lsn was ahead of walbox's own position when a session started, and no other process had held the slot: someone else moved it (pg_replication_slot_advance, a slot created again, an HA manager's copy). Transactions committed in that range were never sent; re-publish them (docs/slots.md).",
	})}
}

// slotAhead is a gap found before START_REPLICATION, reported once the
// session streams.
type slotAhead struct {
	walbox, slot pglogrepl.LSN
}

// checkSlotAhead runs on the replication connection before
// START_REPLICATION at start: it reads the slot and returns the gap to
// report once the session streams, or nil. A failure to read the slot is
// logged and skips the check: it never stops a session.
func (r *Relay) checkSlotAhead(ctx context.Context, conn *pgconn.PgConn, start pglogrepl.LSN) *slotAhead {
	g := r.slotGap
	if r.standby.Load() {
		g.peer = true // another process held the slot while this one stood by
	}
	if !g.streamed {
		return nil // the first session's position is the slot's own
	}
	rows, err := conn.Exec(ctx, fmt.Sprintf(
		`SELECT confirmed_flush_lsn, active, coalesce(active_pid, 0) FROM pg_replication_slots WHERE slot_name = '%s'`,
		strings.ReplaceAll(r.cfg.Slot, "'", "''"))).ReadAll()
	if err == nil && len(rows) == 1 && rows[0].Err != nil {
		err = rows[0].Err
	}
	if err != nil || len(rows) != 1 || len(rows[0].Rows) != 1 {
		if err == nil {
			err = fmt.Errorf("no slot of that name")
		}
		r.log.Warn("could not read the slot's confirmed position before streaming; not checking whether someone moved it ahead of walbox",
			"slot", r.cfg.Slot, "err", err)
		return nil
	}
	row := rows[0].Rows[0]
	if string(row[1]) == "t" {
		var pid uint64
		fmt.Sscan(string(row[2]), &pid)
		if uint32(pid) != g.ownPID {
			g.peer = true
		}
		return nil // START_REPLICATION fails: the slot is busy
	}
	if row[0] == nil || start == 0 || g.peer {
		// start 0: nothing of walbox's position is on this server's
		// history (failover.go); the slot's position decides, and
		// adoptHistory reported why.
		return nil
	}
	slot, err := pglogrepl.ParseLSN(string(row[0]))
	if err != nil || slot <= start {
		return nil
	}
	return &slotAhead{walbox: start, slot: slot}
}

// slotStreamed runs once a session streams (in exactly-once mode, after the
// state topic was read), on the connection it streams on: it reports gap,
// if any, and starts the next period of the check.
func (r *Relay) slotStreamed(conn *pgconn.PgConn, gap *slotAhead) {
	g := r.slotGap
	g.streamed, g.peer, g.ownPID = true, false, conn.PID()
	if gap == nil {
		return
	}
	if r.delivery.committedThrough() >= gap.slot {
		return // Kafka has every transaction up to the slot's position
	}
	bytes := uint64(gap.slot - gap.walbox)
	g.skippedBytes.Add(float64(bytes))
	g.from.Store(uint64(gap.walbox))
	g.to.Store(uint64(gap.slot))
	g.at.Store(time.Now().UnixNano())
	g.count.Add(1)
	r.log.Error(fmt.Sprintf("the slot %q was moved ahead of walbox: its confirmed_flush_lsn is %s, walbox's position is %s, and no other process held the slot since walbox last streamed it, so the server skips every transaction committed between them (%d bytes of WAL) and walbox never receives those events. Likely causes: the slot was created again (an HA manager such as Patroni promoted a replica before it had a copy of the slot, or someone dropped and re-created it), advanced with pg_replication_slot_advance, or restored from elsewhere. Streaming goes on from %s; re-publish the outbox rows committed since a margin before the newest event consumers received, e.g. walbox replay --from-table --where \"created_at >= '<commit time of the newest event received>'::timestamptz - interval '<margin>'\" (docs/slots.md, If the slot moved ahead)",
		r.cfg.Slot, gap.slot, gap.walbox, bytes, gap.slot),
		"slot", r.cfg.Slot, "slot_confirmed_flush_lsn", gap.slot.String(), "walbox_lsn", gap.walbox.String(),
		"skipped_wal_bytes", bytes)
}

// SlotSkipped returns the last range of WAL the server skipped because
// someone else had moved the slot ahead of walbox (from walbox's position
// to the slot's), when it was noticed, and how many such ranges were
// reported since the start; zero values when none. It backs /readyz's
// detail. Safe for concurrent use.
func (r *Relay) SlotSkipped() (from, to pglogrepl.LSN, at time.Time, count uint64) {
	g := r.slotGap
	n := g.count.Load()
	if n == 0 {
		return 0, 0, time.Time{}, 0
	}
	return pglogrepl.LSN(g.from.Load()), pglogrepl.LSN(g.to.Load()), time.Unix(0, g.at.Load()).UTC(), n
}
