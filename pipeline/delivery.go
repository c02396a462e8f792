package pipeline

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/checkpoint"
)

// delivery is a delivery mode as the loop sees it: the loop calls it at
// fixed points of a session and never asks which mode it is. A unit is a
// Postgres transaction, or a dead-lettered non-transactional outbox message.
// atLeastOnce (below) and eosState (eos_txn.go, Config.Delivery =
// DeliveryExactlyOnce) implement it; all of it runs on the loop goroutine
// except refused and acked, which promise callbacks call.
type delivery interface {
	// skips reports whether the unit of key is in Kafka already, so that
	// the change or message of key is not produced again.
	skips(key replayKey) bool
	// divert returns the record to produce in place of rec (the
	// dead-letter record of one Kafka refused before), or rec.
	divert(rec *kgo.Record, m *inflightRecord) *kgo.Record
	// produce is called for each record produced; false means the mode
	// holds it back (queued while a commit runs) and hands it to the
	// producer itself later (sessionLink.send).
	produce(rec *kgo.Record) bool
	// refused is called when Kafka refused rec; false leaves the error to
	// the loop. Runs in a promise callback.
	refused(rec *kgo.Record, m *inflightRecord, err error) bool
	// acked is called when Kafka acknowledged the record of key. Runs in
	// a promise callback.
	acked(key replayKey)
	// unitDone is called when a unit is complete; end is where it ends.
	unitDone(key replayKey, end pglogrepl.LSN)
	// due is when the loop must stop waiting for WAL for tick, zero if
	// it need not; tick runs between receives (time passes).
	due() time.Time
	tick(ctx context.Context) error
	// mayConfirm caps the tracker's position tracked at what may be
	// confirmed to the server; false when nothing may be confirmed.
	mayConfirm(tracked pglogrepl.LSN) (pglogrepl.LSN, bool)
	// fencedOff reports whether another instance took the mode's identity
	// over: nothing more may be committed or confirmed.
	fencedOff() bool
	// resumeFrom is the position a new session would start from, given
	// the tracker's: what is already committed.
	resumeFrom(tracked pglogrepl.LSN) pglogrepl.LSN
	// idle reports whether the mode holds no record and no open unit of
	// its own; flushUnits asks it to commit what it holds now (true while
	// the loop must wait for that).
	idle() bool
	flushUnits(ctx context.Context, tracked pglogrepl.LSN) (hold bool, err error)
	// settle waits for work of the mode still running (a commit) before
	// the session drains; finish ends what is open after the drain;
	// endSession runs once the session's loop returned.
	settle(ctx context.Context)
	finish(ctx context.Context)
	endSession(ctx context.Context)
}

// deliveryMode is a delivery as the relay sets it up between sessions.
type deliveryMode interface {
	delivery
	// bind ties the mode to the loop of a new session.
	bind(link sessionLink, produceCtx context.Context)
	// run is called once, with the position Run starts from.
	run(start pglogrepl.LSN)
	// sessionTracker is the tracker a new session starts with.
	sessionTracker(t *checkpoint.Tracker) *checkpoint.Tracker
	// needsHistory reports whether a session must stop when the server's
	// timeline history cannot be read.
	needsHistory() bool
	// startSession runs once the session holds the slot, before it
	// streams from srv; followedFrom is the history recorded for what
	// walbox streamed before the server was promoted under it, nil if it
	// was not (standbyFollowed). It returns the producer the session
	// uses (p, or the one that replaced it).
	startSession(ctx context.Context, p Producer, srv serverHistory, followedFrom *History) (Producer, error)
	// rewound is called when the server's history was rewound to start.
	rewound(start pglogrepl.LSN)
	// committedThrough is the end of the last unit Kafka holds for
	// certain, zero when the mode does not know.
	committedThrough() pglogrepl.LSN
	// buffersUncounted reports whether the producer may hold records the
	// in-flight count does not count (a state record).
	buffersUncounted() bool
	// lostSessionAborted reports whether records a lost session could not
	// purge are thrown away by a transaction abort anyway.
	lostSessionAborted() bool
	// unfence clears a fence after another instance took the mode's
	// identity over, so that the relay can stand by: clearFailure (the
	// relay's failure) first, then its own; false (and "") when the mode
	// is never fenced. id names the identity.
	unfence(clearFailure func()) (id string, ok bool)
}

// sessionLink is what a delivery mode may ask of the session's loop.
type sessionLink interface {
	// confirmNow sends a status update now; errNoConnection without a
	// replication connection (unit tests).
	confirmNow(ctx context.Context) error
	// tracked is the tracker's confirmable position.
	tracked() pglogrepl.LSN
	// send hands a record the mode held back to the producer.
	send(rec *kgo.Record)
	// interrupt ends the loop's wait for WAL; safe for concurrent use.
	// interrupted then tells the loop, on its goroutine, that the
	// socket's deadline moved.
	interrupt()
	interrupted()
}

// errNoConnection is sessionLink.confirmNow's answer in unit tests, which
// drive the loop without a replication connection.
var errNoConnection = errors.New("no replication connection")

// atLeastOnce is the delivery of Config.Delivery = DeliveryAtLeastOnce:
// every record is produced at once, and the tracker alone decides what is
// confirmed (the dedup window skips what was acknowledged before).
type atLeastOnce struct {
	sent *sentLedger
}

var _ deliveryMode = (*atLeastOnce)(nil)

func (atLeastOnce) skips(replayKey) bool { return false }

func (atLeastOnce) divert(rec *kgo.Record, _ *inflightRecord) *kgo.Record { return rec }

func (atLeastOnce) produce(*kgo.Record) bool { return true }

func (atLeastOnce) refused(*kgo.Record, *inflightRecord, error) bool { return false }

func (a *atLeastOnce) acked(key replayKey) { a.sent.acked(key, false) }

func (atLeastOnce) unitDone(replayKey, pglogrepl.LSN) {}

func (atLeastOnce) due() time.Time { return time.Time{} }

func (atLeastOnce) tick(context.Context) error { return nil }

func (atLeastOnce) mayConfirm(tracked pglogrepl.LSN) (pglogrepl.LSN, bool) { return tracked, true }

func (atLeastOnce) fencedOff() bool { return false }

func (atLeastOnce) resumeFrom(tracked pglogrepl.LSN) pglogrepl.LSN { return tracked }

func (atLeastOnce) idle() bool { return true }

func (atLeastOnce) flushUnits(context.Context, pglogrepl.LSN) (bool, error) { return false, nil }

func (atLeastOnce) settle(context.Context) {}

func (atLeastOnce) finish(context.Context) {}

func (atLeastOnce) endSession(context.Context) {}

func (atLeastOnce) bind(sessionLink, context.Context) {}

func (atLeastOnce) run(pglogrepl.LSN) {}

func (atLeastOnce) sessionTracker(t *checkpoint.Tracker) *checkpoint.Tracker { return t }

func (atLeastOnce) needsHistory() bool { return false }

func (atLeastOnce) startSession(_ context.Context, p Producer, _ serverHistory, _ *History) (Producer, error) {
	return p, nil
}

func (atLeastOnce) rewound(pglogrepl.LSN) {}

func (atLeastOnce) committedThrough() pglogrepl.LSN { return 0 }

func (atLeastOnce) buffersUncounted() bool { return false }

func (atLeastOnce) lostSessionAborted() bool { return false }

func (atLeastOnce) unfence(func()) (string, bool) { return "", false }
