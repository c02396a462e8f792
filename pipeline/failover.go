package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/checkpoint"
)

// A failover (a standby promoted to primary) or a point-in-time recovery
// starts a new timeline. The new timeline shares the old one's WAL only up
// to the switch point, then reuses the same LSNs for other transactions.
// walbox's own position, when it had streamed past the switch point from the
// old primary, means nothing on the new one: requesting it would make the
// server skip every new transaction committed below it. So on
// every connect the relay checks the server's history against the one it
// last streamed (history.go) and never requests a position beyond what the
// two share; the server then starts at the later of that and the slot's own
// confirmed position.

// failover is the failover part of a relay: the identity and timeline
// history of the server each session streams from, the ledger of the
// events sent to Kafka (what a failover erased), and the decision where a
// session resumes. The relay consults it at connect (identify, then
// Relay.adoptHistory); the delivery modes count what Kafka acknowledged
// into its ledger (sent). The Run goroutine owns it, but for sent and the
// counters, which are safe for concurrent use.
type failover struct {
	cfg    *Config
	log    *slog.Logger
	erased prometheus.Counter // walbox_failover_erased_events_total
	// history is the history of the server the last session streamed
	// from; sent counts what it sent per transaction.
	history History
	sent    sentLedger
	// onStandby is set while sessions decode a server in recovery
	// (DecodeFromStandby); standbyFrom is where the first of them started.
	// followed is set when the last session found such a server promoted
	// (or on a new timeline) under walbox, and followedFrom is the history
	// recorded for what walbox streamed there (standbyFollowed).
	onStandby bool
	// historyWarned is the system and timeline whose unreadable history
	// was last warned about (warnUnreadableHistory).
	historyWarned string
	standbyFrom   pglogrepl.LSN
	followed      bool
	followedFrom  History
	// erasedEvents and erasedAt (Unix nanoseconds) report what failovers
	// erased since the start (FailoverErased).
	erasedEvents atomic.Uint64
	erasedAt     atomic.Int64
	// rewinds counts history switches, rewoundTo is the last one's
	// shared end (HistoryRewound).
	rewinds   atomic.Uint64
	rewoundTo atomic.Uint64
}

// identifyHook, when set by a test, runs between the session's first
// question to the server about what it is and the next (a promotion
// happening in between).
var identifyHook func()

// identify asks the server of a new session what it is: whether it is in
// recovery, its system, timeline and WAL end (IDENTIFY_SYSTEM), its
// timeline history, and, after sessions that decoded a standby, the
// slot's confirmed position. A history that cannot be read stops the
// session if strictHistory (exactly once), and shares nothing known beyond
// the timeline numbers otherwise. A standby stops it unless
// DecodeFromStandby.
func (f *failover) identify(ctx context.Context, conn *pgconn.PgConn, strictHistory bool) (serverHistory, error) {
	// The server's history: what walbox's position is checked against
	// (adopt) and, in exactly-once mode, what the committed position
	// is checked against and recorded with (history.go).
	//
	// Whether the server is a standby is asked first: a server being
	// promoted answers IDENTIFY_SYSTEM with its old timeline and replayed
	// WAL, then pg_is_in_recovery() with false, and the session would
	// stream the new timeline recorded as the old one (the next session
	// then took the new timeline's events for erased by a failover). A
	// server that is not in recovery never goes back to it within a
	// connection.
	inRecovery, err := serverInRecovery(ctx, conn)
	if err != nil {
		return serverHistory{}, err
	}
	if identifyHook != nil {
		identifyHook()
	}
	srv, err := identifySystem(ctx, conn, f.cfg.Slot)
	if err != nil {
		return serverHistory{}, err
	}
	srv.InRecovery = inRecovery
	// The timeline's history is read on every connect: two servers on the
	// same timeline number can hold different histories (resumeOnHistory).
	// At least once, a history that cannot be read shares nothing known
	// beyond what the timeline numbers say.
	if err := readAncestry(ctx, conn, &srv); err != nil {
		if strictHistory {
			return serverHistory{}, fmt.Errorf("%w; exactly-once delivery checks its committed position against the server's history and cannot without it: %s",
				err, historyFileHint(srv.Timeline))
		}
		f.warnUnreadableHistory(srv)
	}
	if srv.InRecovery && !f.cfg.DecodeFromStandby {
		// A standby is not a failover: its shorter WAL says nothing
		// about what the primary holds. Nothing is adopted from it.
		return serverHistory{}, &standbyServerError{host: conn.Conn().RemoteAddr().String(), walEnd: srv.WALEnd, timeline: srv.Timeline}
	}
	if srv.InRecovery {
		f.log.Info("decoding from a standby (the server is in recovery), as configured (DecodeFromStandby; walbox run: --heartbeat-interval=0); its WAL is taken for the primary's as far as it has replayed it",
			"slot", f.cfg.Slot, "timeline", srv.Timeline, "replayed_lsn", srv.WALEnd.String())
	}
	if f.onStandby {
		// Whether walbox confirmed this slot past a switch point the
		// standby it decoded crossed (standbyFollowed). Unread, the
		// switch is handled as any other.
		if row, err := simpleQueryRow(ctx, conn, fmt.Sprintf(`SELECT confirmed_flush_lsn::text FROM pg_catalog.pg_replication_slots WHERE slot_name = %s`, quoteLiteral(f.cfg.Slot))); err == nil {
			srv.SlotConfirmed, _ = pglogrepl.ParseLSN(row[0])
		}
	}
	return srv, nil
}

// warnUnreadableHistory says, once per system and timeline, that the
// server's history could not be read: at least once, sessions then go on
// with the timeline numbers alone, which cannot tell apart two servers
// promoted to the same number (two standbys of one primary without a shared
// archive), so a position of the other history may be kept and its events
// after the switch point taken for delivered.
func (f *failover) warnUnreadableHistory(srv serverHistory) {
	key := srv.SystemID + "/" + strconv.FormatInt(int64(srv.Timeline), 10)
	if f.historyWarned == key {
		return
	}
	f.historyWarned = key
	f.log.Warn("the server's timeline history cannot be read, so after a failover walbox compares timeline numbers only, "+
		"which cannot tell two servers promoted to the same timeline number apart (events after the switch could be taken for delivered); "+
		historyFileHint(srv.Timeline),
		"slot", f.cfg.Slot, "timeline", srv.Timeline, "err", srv.SwitchesErr)
}

// historyFileHint says how to give the server back its timeline history.
func historyFileHint(timeline int32) string {
	name := fmt.Sprintf("%08X.history", timeline)
	return fmt.Sprintf("restore %s from the WAL archive into the server's pg_wal directory (its restore_command with %%f = %s and %%p = pg_wal/%s)", name, name, name)
}

// followedFromHistory is the history recorded for what walbox streamed
// on a standby that was then promoted under it, nil if the last session
// found no such promotion (standbyFollowed).
func (f *failover) followedFromHistory() *History {
	if !f.followed {
		return nil
	}
	return &f.followedFrom
}

// historyResume is what a new session does about the history it streamed
// before.
type historyResume struct {
	// start is the position to request: the relay's own position, or at
	// most the shared history's end.
	start pglogrepl.LSN
	// switched is set when the server's history is not the one streamed
	// before, or not all of it: LSN-keyed state from cutoff on is stale.
	switched bool
	// cutoff is the end of the shared history: positions before it are the
	// same transactions on both, positions from it on are not. 0 when
	// nothing is known to be shared.
	cutoff pglogrepl.LSN
	// otherCluster is set when the server is another Postgres cluster:
	// nothing walbox sent is in its history, nor erased from it.
	otherCluster bool
	// reason explains switched for the log.
	reason string
}

// resumeOnHistory decides where a session may start on srv, given that the
// relay last streamed from last (its History, zero before the first session)
// and is at pos. Histories are compared by their content (the switch points
// of the timeline history), not by their timeline numbers: two standbys of
// one primary, promoted one after the other without a shared WAL archive,
// are both on timeline 2 with different transactions after the first
// switch point they do not share.
//
//   - First session: pos comes from the slot on this server; kept.
//   - Another system: nothing is shared (another cluster); the slot's own
//     position decides, and nothing is reported erased.
//   - The same history: kept, unless the server's WAL ends before pos (a
//     server that never had that WAL: a restore from an older backup),
//     which the server cannot be resumed at; the slot's own position
//     decides. A standby decoded on purpose (DecodeFromStandby) has only
//     not replayed that far yet: kept.
//   - An ancestor, a descendant or a sibling history: at most the end of
//     the WAL the two share.
//   - An ancestry that is not known (unreadable): by the timeline numbers,
//     an ancestor timeline up to its switch point, anything else nothing.
func resumeOnHistory(last History, pos pglogrepl.LSN, srv serverHistory) historyResume {
	keep := historyResume{start: pos}
	if !last.Known() {
		return keep
	}
	if last.SystemID != srv.SystemID {
		return historyResume{switched: true, otherCluster: true, reason: fmt.Sprintf(
			"the server is another Postgres cluster (system %s, walbox streamed from system %s): a rebuilt cluster, a pg_upgrade that kept the slot, a blue/green switchover; its transactions are not the ones walbox streamed, and none of those is taken for erased", srv.SystemID, last.SystemID)}
	}
	rel, end := sharedHistory(last, srv.History)
	if rel == historiesUnknown && last.Timeline == srv.Timeline {
		rel = historiesSame
	}
	switch rel {
	case historiesSame:
		if pos <= srv.WALEnd || srv.InRecovery {
			return keep
		}
		return historyResume{switched: true, cutoff: srv.WALEnd, reason: fmt.Sprintf(
			"the server's WAL on timeline %d ends at %s, before walbox's position %s: it is not the server walbox streamed from (a restore from an older backup?)",
			srv.Timeline, srv.WALEnd, pos)}
	case historyAncestor:
		return historyResume{start: min(pos, end), switched: true, cutoff: end, reason: fmt.Sprintf(
			"the server switched from timeline %d to %d at %s (a failover or point-in-time recovery)", last.Timeline, srv.Timeline, end)}
	case historyDescendant, historiesDiverged:
		return historyResume{start: min(pos, end), switched: true, cutoff: end, reason: fmt.Sprintf(
			"the server's timeline %d (switch points %q) is not the history walbox streamed, timeline %d (switch points %q): they share WAL up to %s only (another standby promoted, or the server restored to an earlier point)",
			srv.Timeline, srv.Ancestry, last.Timeline, last.Ancestry, end)}
	}
	sw, ok := srv.Switches[last.Timeline]
	switch {
	case !ok && srv.SwitchesErr != nil:
		return historyResume{switched: true, reason: fmt.Sprintf(
			"the server is on timeline %d, walbox streamed timeline %d, and the server's timeline history cannot be read (%v)", srv.Timeline, last.Timeline, srv.SwitchesErr)}
	case !ok:
		return historyResume{switched: true, reason: fmt.Sprintf(
			"walbox streamed timeline %d, which is not an ancestor of the server's timeline %d", last.Timeline, srv.Timeline)}
	}
	return historyResume{start: min(pos, sw), switched: true, cutoff: sw, reason: fmt.Sprintf(
		"the server switched from timeline %d to %d at %s (a failover or point-in-time recovery)", last.Timeline, srv.Timeline, sw)}
}

// FailoverErased returns how many events this process had sent to Kafka
// of transactions a failover then erased (they are in Kafka, the database
// no longer has them), summed over every failover since the start, and
// when the last such failover was noticed; 0 and the zero time when none.
// It backs /readyz's detail. Safe for concurrent use.
func (r *Relay) FailoverErased() (events uint64, at time.Time) {
	f := &r.failover
	n := f.erasedEvents.Load()
	if n == 0 {
		return 0, time.Time{}
	}
	return n, time.Unix(0, f.erasedAt.Load()).UTC()
}

// HistoryRewound returns how many times the server's history was found
// switched (a failover, a restore, another cluster) and the end of the WAL
// the last switch's two histories share: positions after it are other
// transactions now. It feeds the trailing slot's keeper
// (retention.Config.Rewound). Safe for concurrent use.
func (r *Relay) HistoryRewound() (n uint64, to pglogrepl.LSN) {
	n = r.failover.rewinds.Load()
	return n, pglogrepl.LSN(r.failover.rewoundTo.Load())
}

// adoptHistory runs when a session has identified its server, before it
// starts replication: it caps the start position to the history walbox
// shares with the server (failover.adopt), drops LSN-keyed state the new
// history makes stale, and reports what the failover erased. It returns the
// position to request.
func (r *Relay) adoptHistory(pos pglogrepl.LSN, srv serverHistory) pglogrepl.LSN {
	start, cutoff, switched := r.failover.adopt(pos, srv, r.lastCommit)
	if !switched {
		return start
	}
	// LSNs from the cutoff on name other transactions now.
	// Confirmed first: a keeper that sees the rewind must not then record
	// the old history's position as confirmed now.
	r.confirmed.Store(min(r.confirmed.Load(), uint64(start)))
	r.failover.rewoundTo.Store(uint64(cutoff))
	r.failover.rewinds.Add(1)
	r.tracker = checkpoint.New(start)
	r.delivery.rewound(start)
	r.dedup.forgetFrom(cutoff)
	r.failover.sent.forgetFrom(cutoff)
	if r.lastCommit >= cutoff {
		// The dedup window is consulted up to lastCommit: only below the
		// cutoff are its keys those of the same transactions.
		r.lastCommit = 0
		if cutoff > 0 {
			r.lastCommit = cutoff - 1
		}
	}
	return start
}

// adopt decides where a session resumes on srv, walbox being at pos with
// lastCommit the highest commit received, records srv as the history
// streamed, and reports what a switch erased. switched is set when
// LSN-keyed state from cutoff on is stale (the caller drops it).
func (f *failover) adopt(pos pglogrepl.LSN, srv serverHistory, lastCommit pglogrepl.LSN) (start, cutoff pglogrepl.LSN, switched bool) {
	last := f.history
	f.history = srv.History
	h := resumeOnHistory(last, pos, srv)
	f.followed = h.switched && f.onStandby && standbyFollowed(last, f.standbyFrom, srv)
	f.followedFrom = last
	if srv.InRecovery && !f.onStandby {
		f.standbyFrom = pos
	}
	f.onStandby = srv.InRecovery
	if f.followed {
		f.log.Info("the standby walbox decodes was promoted, or followed a new timeline, while walbox streamed from it: what walbox streamed is in the server's history; resuming at walbox's position",
			"slot", f.cfg.Slot, "timeline", srv.Timeline, "previous_timeline", last.Timeline, "switch_points", srv.Ancestry,
			"resume_lsn", pos.String())
		return pos, 0, false
	}
	if !h.switched {
		return h.start, 0, false
	}
	streamedTo := max(pos, lastCommit)
	events, exact := f.sent.since(h.cutoff)
	attrs := []any{"slot", f.cfg.Slot, "reason", h.reason, "switch_lsn", h.cutoff.String(),
		"timeline", srv.Timeline, "previous_timeline", last.Timeline, "resume_lsn", h.start.String()}
	switch {
	case h.otherCluster:
		// Not an erasure: the events are in the history of the cluster
		// walbox streamed before, which this one never shared.
		f.log.Error(fmt.Sprintf("the server is another Postgres cluster than the one walbox streamed from (system %s, before %s): nothing walbox sent is taken for erased; streaming this cluster's slot from its own position. Make sure --postgres-dsn is meant to reach this cluster: Kafka now gets its events after the other's",
			srv.SystemID, last.SystemID),
			append(attrs, "system_id", srv.SystemID, "previous_system_id", last.SystemID, "another_cluster", true)...)
	case events > 0:
		f.erased.Add(float64(events))
		f.erasedEvents.Add(events)
		f.erasedAt.Store(time.Now().UnixNano())
		qualifier := ""
		if !exact {
			qualifier = "at least "
		}
		streamed := fmt.Sprintf("timeline %d", last.Timeline)
		if last.Ancestry != "" {
			streamed += fmt.Sprintf(" (switch points %s)", last.Ancestry)
		}
		f.log.Error(fmt.Sprintf("the database no longer has transactions walbox had already sent to Kafka: %s%d events of transactions committed between %s and %s on the history walbox streamed, %s; consumers may need to compensate for them. Streaming the new history from %s",
			qualifier, events, h.cutoff, streamedTo, streamed, h.start),
			append(attrs, "erased_from_lsn", h.cutoff.String(), "erased_to_lsn", streamedTo.String(),
				"erased_events", events, "erased_events_exact", exact)...)
	case streamedTo > h.cutoff:
		f.log.Warn(fmt.Sprintf("walbox had streamed past the end of the history it shares with the server (to %s), sending no events from there; streaming the new history from %s",
			streamedTo, h.start), attrs...)
	default:
		f.log.Info("the server's history changed; walbox had not streamed past the shared part", attrs...)
	}
	return h.start, h.cutoff, true
}

// standbyFollowed reports whether srv's history continues last, the
// history recorded for sessions that decoded a standby (DecodeFromStandby)
// from standbyFrom on: a walsender on a standby follows its server's
// timeline, through a promotion or onto the new timeline of the primary it
// replays from, so what it streamed after the switch point is the new
// timeline's. Only if walbox began decoding the standby at or before that
// switch point: beyond it, walbox had streamed the old primary's WAL. And
// only if the server's slot was confirmed past the switch point: walbox
// then streamed this server's new timeline, not another server (a standby
// of the same primary, ahead of the switch point, with a slot of the same
// name) whose old timeline this server lacks.
func standbyFollowed(last History, standbyFrom pglogrepl.LSN, srv serverHistory) bool {
	if !last.Known() || last.SystemID != srv.SystemID || last.Timeline >= srv.Timeline {
		return false
	}
	var end pglogrepl.LSN
	switch rel, e := sharedHistory(last, srv.History); rel {
	case historyAncestor:
		end = e
	case historiesUnknown:
		sw, ok := srv.Switches[last.Timeline]
		if !ok {
			return false
		}
		end = sw
	default:
		return false
	}
	return standbyFrom <= end && srv.SlotConfirmed > end
}

// sentLedger counts the records of each transaction that reached Kafka,
// by commit LSN, so that a failover can say how many events of
// transactions the new history does not have consumers may have seen:
// records Kafka acknowledged (at least once), or that a committed Kafka
// transaction holds (exactly once), each record once however often it was
// produced (by its place in its transaction). Records purged unacknowledged
// or thrown away by an aborted Kafka transaction are not counted. It keeps
// at most maxSentMarks transactions: when full it forgets the oldest half,
// and counts reaching back to them are then lower bounds.
//
// Safe for concurrent use: acks arrive on the producer's goroutines.
type sentLedger struct {
	mu    sync.Mutex
	marks map[pglogrepl.LSN]*ordSet
	// pending holds, in exactly-once mode, the keys of records Kafka
	// acknowledged in the open transaction, counted once it commits.
	pending []replayKey
	// forgotten is the highest commit LSN forgotten for space; truncated
	// is set once one was.
	forgotten pglogrepl.LSN
	truncated bool
}

// ordSet is the set of places in one transaction of its records counted.
type ordSet struct {
	bits    []uint64
	message bool // the non-transactional message of this LSN
	n       uint64
}

func (o *ordSet) add(ord uint32) {
	if ord == nonTransactional {
		if !o.message {
			o.message, o.n = true, o.n+1
		}
		return
	}
	w, b := int(ord/64), uint64(1)<<(ord%64)
	if w >= len(o.bits) {
		o.bits = append(o.bits, make([]uint64, w+1-len(o.bits))...)
	}
	if o.bits[w]&b == 0 {
		o.bits[w] |= b
		o.n++
	}
}

// maxSentMarks bounds the ledger: a minute of a thousand transactions a
// second.
const maxSentMarks = 1 << 16

// acked counts a record Kafka acknowledged; inTxn defers it to the commit
// of its Kafka transaction (committed).
func (l *sentLedger) acked(key replayKey, inTxn bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if inTxn {
		l.pending = append(l.pending, key)
		return
	}
	l.count(key)
}

// committed counts the records of the Kafka transaction that committed.
func (l *sentLedger) committed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, k := range l.pending {
		l.count(k)
	}
	l.pending = l.pending[:0]
}

// aborted drops the records of an aborted Kafka transaction: no
// read_committed consumer sees them.
func (l *sentLedger) aborted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pending = l.pending[:0]
}

func (l *sentLedger) count(key replayKey) {
	if l.marks == nil {
		l.marks = map[pglogrepl.LSN]*ordSet{}
	}
	o := l.marks[key.commit]
	if o == nil {
		if l.truncated && key.commit <= l.forgotten {
			return // counted before, maybe: the count is a lower bound
		}
		if len(l.marks) == maxSentMarks {
			l.forgetOldest()
		}
		o = &ordSet{}
		l.marks[key.commit] = o
	}
	o.add(key.ord)
}

// forgetOldest drops the older half of the marks.
func (l *sentLedger) forgetOldest() {
	commits := make([]pglogrepl.LSN, 0, len(l.marks))
	for c := range l.marks {
		commits = append(commits, c)
	}
	slices.Sort(commits)
	for _, c := range commits[:len(commits)/2] {
		delete(l.marks, c)
	}
	l.forgotten = max(l.forgotten, commits[len(commits)/2-1])
	l.truncated = true
}

// since returns how many records were counted of transactions committed at
// or after from, and whether that count is exact (no mark that could count
// was forgotten).
func (l *sentLedger) since(from pglogrepl.LSN) (n uint64, exact bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c, o := range l.marks {
		if c >= from {
			n += o.n
		}
	}
	return n, !l.truncated || l.forgotten < from
}

// forgetFrom drops the marks of transactions committed at or after from:
// those LSNs belong to other transactions on the new history.
func (l *sentLedger) forgetFrom(from pglogrepl.LSN) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.marks {
		if c >= from {
			delete(l.marks, c)
		}
	}
	if l.forgotten >= from {
		// What was forgotten there is of the old history: nothing of
		// the new one is missing from the count.
		l.forgotten = 0
		if from > 0 {
			l.forgotten = from - 1
		}
	}
	kept := l.pending[:0]
	for _, k := range l.pending {
		if k.commit < from {
			kept = append(kept, k)
		}
	}
	l.pending = kept
}
