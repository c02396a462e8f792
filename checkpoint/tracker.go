package checkpoint

import (
	"sync/atomic"

	"github.com/jackc/pglogrepl"
)

// Txn counts the records of one transaction that Kafka has not acknowledged
// yet. Add and the commit bookkeeping belong to the replication loop; Ack may
// be called from any goroutine.
type Txn struct {
	pending   atomic.Int64
	endLSN    pglogrepl.LSN
	committed bool
}

// Add registers n more records that must be acknowledged before the
// transaction can be confirmed. Call it before handing the records to the
// producer, so an early ack can never drive the count below zero.
func (t *Txn) Add(n int) { t.pending.Add(int64(n)) }

// Ack records one acknowledged record and returns how many are still
// pending (0 when this was the last so far). Safe for concurrent use.
func (t *Txn) Ack() int64 { return t.pending.Add(-1) }

// Pending returns the number of records not acknowledged yet.
func (t *Txn) Pending() int64 { return t.pending.Load() }

func (t *Txn) done() bool { return t.committed && t.pending.Load() <= 0 }

// Tracker orders transactions by commit and confirms the longest prefix of
// them that Kafka has fully acknowledged. Not safe for concurrent use, except
// for Txn.Ack on the transactions it hands out.
type Tracker struct {
	// queue holds transactions in commit order (pgoutput sends whole
	// transactions in commit order when streaming is off), from head on.
	queue     []*Txn
	head      int
	open      *Txn
	confirmed pglogrepl.LSN
}

// New returns a tracker whose confirmed position starts at start: normally the
// slot's confirmed_flush_lsn, which is already durable.
func New(start pglogrepl.LSN) *Tracker {
	return &Tracker{confirmed: start}
}

// Begin opens a transaction. An open transaction that was never committed
// (its stream was cut) is abandoned first: the server sends it again in full.
func (tr *Tracker) Begin() *Txn {
	tr.Abandon()
	t := &Txn{}
	tr.open = t
	tr.queue = append(tr.queue, t)
	return t
}

// Commit closes the open transaction t at endLSN, the position just past its
// commit record.
func (tr *Tracker) Commit(t *Txn, endLSN pglogrepl.LSN) {
	t.endLSN = endLSN
	t.committed = true
	if tr.open == t {
		tr.open = nil
	}
}

// Abandon forgets the open, uncommitted transaction, if any. Used after the
// replication connection is lost mid-transaction: acks still arriving for its
// records are harmless, and the server re-sends the whole transaction on the
// next connection.
func (tr *Tracker) Abandon() {
	if tr.open == nil {
		return
	}
	// The open transaction is always the last one queued.
	if n := len(tr.queue); n > tr.head && tr.queue[n-1] == tr.open {
		tr.queue[n-1] = nil
		tr.queue = tr.queue[:n-1]
	}
	tr.open = nil
}

// Rewind forgets every transaction not confirmed yet, open or committed.
// A new replication session starts at Confirmed() and the server sends all
// of them again, so any of their acks still to come (or never to come, for
// a record that failed) must not hold the new ones back.
func (tr *Tracker) Rewind() pglogrepl.LSN {
	c := tr.Confirmed()
	clear(tr.queue)
	tr.queue = tr.queue[:0]
	tr.head = 0
	tr.open = nil
	return c
}

// Confirmed advances past every fully acknowledged transaction at the head of
// the queue and returns the end LSN of the last one: the position that is safe
// to report as flushed.
func (tr *Tracker) Confirmed() pglogrepl.LSN {
	for tr.head < len(tr.queue) {
		t := tr.queue[tr.head]
		if !t.done() {
			break
		}
		if t.endLSN > tr.confirmed {
			tr.confirmed = t.endLSN
		}
		tr.queue[tr.head] = nil
		tr.head++
	}
	// Reuse the backing array once it is drained, and compact when the dead
	// prefix dominates, so a long run does not grow the slice without bound.
	if tr.head == len(tr.queue) {
		tr.queue = tr.queue[:0]
		tr.head = 0
	} else if tr.head > 1024 && tr.head > len(tr.queue)/2 {
		n := copy(tr.queue, tr.queue[tr.head:])
		clear(tr.queue[n:])
		tr.queue = tr.queue[:n]
		tr.head = 0
	}
	return tr.confirmed
}

// Idle reports whether nothing is in flight: no transaction partly received
// and none waiting for acks. Only then may a server-reported position be
// confirmed.
func (tr *Tracker) Idle() bool {
	tr.Confirmed()
	return tr.open == nil && tr.head == len(tr.queue)
}

// ObserveServerPosition confirms lsn, the position a keepalive reports, if the
// tracker is idle. Without this a slot whose publication sees no traffic never
// advances, and the server retains WAL for the whole busy database without
// bound. Confirming it while anything is in flight is exactly the bug that
// loses events after a crash, hence the Idle check. Returns the confirmed LSN.
func (tr *Tracker) ObserveServerPosition(lsn pglogrepl.LSN) pglogrepl.LSN {
	if tr.Idle() && lsn > tr.confirmed {
		tr.confirmed = lsn
	}
	return tr.confirmed
}

// Queued returns the number of transactions received but not yet confirmed,
// including an open one.
func (tr *Tracker) Queued() int { return len(tr.queue) - tr.head }
