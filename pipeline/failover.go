package pipeline

import (
	"fmt"
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
	// reason explains switched for the log.
	reason string
}

// resumeOnHistory decides where a session may start on srv, given that the
// relay last streamed from last (its History, zero before the first session)
// and is at pos. It follows resumeFrom's rule: a position on an ancestor
// timeline is trusted only up to that timeline's switch point.
//
//   - First session: pos comes from the slot on this server; kept.
//   - Same system and timeline: kept, unless the server's WAL ends before
//     pos (a server that never had that WAL: a restore from an older
//     backup), which the server cannot be resumed at; the slot's own
//     position decides.
//   - An ancestor timeline: at most its switch point.
//   - Another system, or a timeline that is not an ancestor: nothing is
//     shared; the slot's own position decides.
func resumeOnHistory(last History, pos pglogrepl.LSN, srv serverHistory) historyResume {
	keep := historyResume{start: pos}
	if !last.Known() {
		return keep
	}
	if last.SystemID != srv.SystemID {
		return historyResume{switched: true, reason: fmt.Sprintf(
			"the server is another Postgres cluster (system %s, walbox streamed from system %s)", srv.SystemID, last.SystemID)}
	}
	if last.Timeline == srv.Timeline {
		if pos <= srv.WALEnd {
			return keep
		}
		return historyResume{switched: true, cutoff: srv.WALEnd, reason: fmt.Sprintf(
			"the server's WAL on timeline %d ends at %s, before walbox's position %s: it is not the server walbox streamed from (a restore from an older backup?)",
			srv.Timeline, srv.WALEnd, pos)}
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

// historyChanged reports whether a session at pos needs the server's
// timeline history to decide where to start: the server is not on the
// timeline the relay last streamed, or its WAL ends before pos.
func (r *Relay) historyChanged(pos pglogrepl.LSN, srv serverHistory) bool {
	return r.history.Known() && (r.history.SystemID != srv.SystemID || r.history.Timeline != srv.Timeline || pos > srv.WALEnd)
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
	if !h.switched {
		return h.start
	}
	streamedTo := max(pos, r.lastCommit)
	events, exact := r.sent.since(h.cutoff)
	attrs := []any{"slot", r.cfg.Slot, "reason", h.reason, "switch_lsn", h.cutoff.String(),
		"timeline", srv.Timeline, "previous_timeline", last.Timeline, "resume_lsn", h.start.String()}
	switch {
	case events > 0:
		r.metrics.failoverErased.Add(float64(events))
		r.erasedEvents.Add(events)
		r.erasedAt.Store(time.Now().UnixNano())
		qualifier := ""
		if !exact {
			qualifier = "at least "
		}
		r.log.Error(fmt.Sprintf("the database no longer has transactions walbox had already sent to Kafka: %s%d events of transactions committed between %s and %s on timeline %d; consumers may need to compensate for them. Streaming the new history from %s",
			qualifier, events, h.cutoff, streamedTo, last.Timeline, h.start),
			append(attrs, "erased_from_lsn", h.cutoff.String(), "erased_to_lsn", streamedTo.String(),
				"erased_events", events, "erased_events_exact", exact)...)
	case streamedTo > h.cutoff:
		r.log.Warn(fmt.Sprintf("walbox had streamed past the end of the history it shares with the server (to %s), sending no events from there; streaming the new history from %s",
			streamedTo, h.start), attrs...)
	default:
		r.log.Info("the server's history changed; walbox had not streamed past the shared part", attrs...)
	}
	// LSNs from the cutoff on name other transactions now.
	r.tracker = checkpoint.New(h.start)
	if r.eos != nil {
		r.eos.safe = min(r.eos.safe, h.start)
	}
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

// sentLedger counts the records the relay handed to Kafka per commit LSN,
// so that a failover can say how many events it sent of transactions the
// new history does not have. It keeps one mark per transaction, at most
// maxSentMarks: when full it forgets the oldest half, and counts from
// before them are then lower bounds.
//
// Owned by the goroutine running Relay.Run.
type sentLedger struct {
	marks []sentMark
	// truncated is set once old marks were forgotten.
	truncated bool
}

type sentMark struct {
	commit pglogrepl.LSN
	n      uint64
}

// maxSentMarks bounds the ledger: 1 MiB, a minute of a thousand
// transactions a second.
const maxSentMarks = 1 << 16

// add counts one record of the transaction that commits at commit.
func (l *sentLedger) add(commit pglogrepl.LSN) {
	if n := len(l.marks); n > 0 && l.marks[n-1].commit == commit {
		l.marks[n-1].n++
		return
	}
	if len(l.marks) == maxSentMarks {
		k := copy(l.marks, l.marks[maxSentMarks/2:])
		l.marks = l.marks[:k]
		l.truncated = true
	}
	l.marks = append(l.marks, sentMark{commit: commit, n: 1})
}

// since returns how many records were sent of transactions committed at or
// after from, and whether that count is exact (no mark that could count
// was forgotten).
func (l *sentLedger) since(from pglogrepl.LSN) (n uint64, exact bool) {
	for _, m := range l.marks {
		if m.commit >= from {
			n += m.n
		}
	}
	exact = !l.truncated || (len(l.marks) > 0 && l.marks[0].commit < from)
	return n, exact
}

// forgetFrom drops the marks of transactions committed at or after from:
// those LSNs belong to other transactions on the new history.
func (l *sentLedger) forgetFrom(from pglogrepl.LSN) {
	kept := l.marks[:0]
	for _, m := range l.marks {
		if m.commit < from {
			kept = append(kept, m)
		}
	}
	clear(l.marks[len(kept):])
	l.marks = kept
}
