package pipeline

import (
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

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
	n := r.erasedEvents.Load()
	if n == 0 {
		return 0, time.Time{}
	}
	return n, time.Unix(0, r.erasedAt.Load()).UTC()
}

// HistoryRewound returns how many times the server's history was found
// switched (a failover, a restore, another cluster) and the end of the WAL
// the last switch's two histories share: positions after it are other
// transactions now. It feeds the trailing slot's keeper
// (retention.Config.Rewound). Safe for concurrent use.
func (r *Relay) HistoryRewound() (n uint64, to pglogrepl.LSN) {
	n = r.rewinds.Load()
	return n, pglogrepl.LSN(r.rewoundTo.Load())
}

// adoptHistory runs when a session has identified its server, before it
// starts replication: it caps the start position to the history walbox
// shares with the server, drops LSN-keyed state the new history makes
// stale, and reports what the failover erased. It returns the position to
// request.
func (r *Relay) adoptHistory(pos pglogrepl.LSN, srv serverHistory) pglogrepl.LSN {
	last := r.history
	r.history = srv.History
	h := resumeOnHistory(last, pos, srv)
	r.followed = h.switched && r.onStandby && standbyFollowed(last, r.standbyFrom, srv)
	r.followedFrom = last
	if srv.InRecovery && !r.onStandby {
		r.standbyFrom = pos
	}
	r.onStandby = srv.InRecovery
	if r.followed {
		r.log.Info("the standby walbox decodes was promoted, or followed a new timeline, while walbox streamed from it: what walbox streamed is in the server's history; resuming at walbox's position",
			"slot", r.cfg.Slot, "timeline", srv.Timeline, "previous_timeline", last.Timeline, "switch_points", srv.Ancestry,
			"resume_lsn", pos.String())
		return pos
	}
	if !h.switched {
		return h.start
	}
	streamedTo := max(pos, r.lastCommit)
	events, exact := r.sent.since(h.cutoff)
	attrs := []any{"slot", r.cfg.Slot, "reason", h.reason, "switch_lsn", h.cutoff.String(),
		"timeline", srv.Timeline, "previous_timeline", last.Timeline, "resume_lsn", h.start.String()}
	switch {
	case h.otherCluster:
		// Not an erasure: the events are in the history of the cluster
		// walbox streamed before, which this one never shared.
		r.log.Error(fmt.Sprintf("the server is another Postgres cluster than the one walbox streamed from (system %s, before %s): nothing walbox sent is taken for erased; streaming this cluster's slot from its own position. Make sure --postgres-dsn is meant to reach this cluster: Kafka now gets its events after the other's",
			srv.SystemID, last.SystemID),
			append(attrs, "system_id", srv.SystemID, "previous_system_id", last.SystemID, "another_cluster", true)...)
	case events > 0:
		r.metrics.failoverErased.Add(float64(events))
		r.erasedEvents.Add(events)
		r.erasedAt.Store(time.Now().UnixNano())
		qualifier := ""
		if !exact {
			qualifier = "at least "
		}
		streamed := fmt.Sprintf("timeline %d", last.Timeline)
		if last.Ancestry != "" {
			streamed += fmt.Sprintf(" (switch points %s)", last.Ancestry)
		}
		r.log.Error(fmt.Sprintf("the database no longer has transactions walbox had already sent to Kafka: %s%d events of transactions committed between %s and %s on the history walbox streamed, %s; consumers may need to compensate for them. Streaming the new history from %s",
			qualifier, events, h.cutoff, streamedTo, streamed, h.start),
			append(attrs, "erased_from_lsn", h.cutoff.String(), "erased_to_lsn", streamedTo.String(),
				"erased_events", events, "erased_events_exact", exact)...)
	case streamedTo > h.cutoff:
		r.log.Warn(fmt.Sprintf("walbox had streamed past the end of the history it shares with the server (to %s), sending no events from there; streaming the new history from %s",
			streamedTo, h.start), attrs...)
	default:
		r.log.Info("the server's history changed; walbox had not streamed past the shared part", attrs...)
	}
	// LSNs from the cutoff on name other transactions now.
	// Confirmed first: a keeper that sees the rewind must not then record
	// the old history's position as confirmed now.
	r.confirmed.Store(min(r.confirmed.Load(), uint64(h.start)))
	r.rewoundTo.Store(uint64(h.cutoff))
	r.rewinds.Add(1)
	r.tracker = checkpoint.New(h.start)
	r.delivery.rewound(h.start)
	r.dedup.forgetFrom(h.cutoff)
	r.sent.forgetFrom(h.cutoff)
	if r.lastCommit >= h.cutoff {
		// The dedup window is consulted up to lastCommit: only below the
		// cutoff are its keys those of the same transactions.
		r.lastCommit = 0
		if h.cutoff > 0 {
			r.lastCommit = h.cutoff - 1
		}
	}
	return h.start
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
