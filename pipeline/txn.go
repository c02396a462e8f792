package pipeline

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/router"
)

// Exactly-once delivery (Config.Delivery = DeliveryExactlyOnce).
//
// The loop produces into a Kafka transaction that it begins with the first
// record after a commit. It is committed between two Postgres
// transactions, once it holds TransactionMaxRecords records or has been
// open for TransactionMaxInterval; only a Postgres transaction too large
// for one Kafka transaction (TransactionSplitRecords records, or half the
// transaction timeout) is split across several (eos_split.go). Before the
// commit the loop produces, in the same transaction, a record to the state
// topic keyed by the transactional id that names the commit LSN and end
// LSN of the last whole Postgres transaction in it (and, after a split,
// the position inside the next one), and flushes. Only after
// EndTransaction succeeded may the slot be confirmed past the
// transaction's first Postgres transaction (eosState.confirmable), and
// never inside a Postgres transaction.
//
// A new session (start, reconnect, restart after an abort) first loads the
// producer id, which fences a predecessor with the same transactional id
// and completes or aborts the transaction it left, then reads the last
// position committed under the id (read_committed) and skips every Postgres
// transaction that ends at or before it (unitCovered): the slot's confirmed position
// may lag behind what Kafka committed (a crash between commit and confirm),
// and what was committed must not be produced twice.
//
// franz-go runs one transaction at a time per producer: EndTransaction
// requires a flush, and nothing may be produced until it returns. So the
// flush and the commit run in a goroutine of their own (eosStartCommit)
// while the loop goes on reading WAL and routing: the records of the next
// transaction wait in a queue, counted against the in-flight limits, and
// are produced into a new transaction as soon as the commit returned. The
// slot is confirmed by the loop, after it has seen the commit succeed.
//
// What if the process dies:
//   - while producing, or between "produced" and the commit: the broker
//     aborts the open transaction when the next instance loads the producer
//     id (or after the transaction timeout); nothing of it is visible to
//     read_committed consumers, and the slot was not confirmed past it, so
//     it is produced again;
//   - between the commit and the slot confirm: the slot sends the
//     transactions again, and the state topic says they are committed, so
//     they are skipped;
//   - after the confirm: nothing is sent again.

// eosState is the exactly-once state of a relay. The loop goroutine owns
// every field except abortReq and the divert set, which promise callbacks
// write.
type eosState struct {
	txp         TxnProducer
	state       StateStore
	txnID       string
	maxRecords  int
	maxInterval time.Duration
	// splitRecords is Config.TransactionSplitRecords (eos_split.go).
	splitRecords int
	phase        func(string)
	m            *eosMetrics

	// timeout is the transaction timeout (Config.TransactionTimeout).
	timeout time.Duration
	// txnStart is when BeginTransaction was last called (unix
	// nanoseconds): the broker's timeout of that Kafka transaction runs
	// from a little later. Read by promise callbacks too.
	txnStart atomic.Int64

	// open is set while the current Kafka transaction has records or
	// Postgres transactions (produced or queued); begun once
	// BeginTransaction was called for it. began is when it opened.
	open  bool
	begun bool
	began time.Time
	// committing is the commit running in its goroutine, nil if none;
	// queue holds the records produced meanwhile, for the next transaction.
	committing *pendingCommit
	queue      []*kgo.Record
	// records counts the outbox records produced into the open transaction;
	// unitRecords those of the Postgres transaction still being received.
	records     int
	unitRecords int
	// unitKey is the key of the last record produced (or queued) of the
	// Postgres transaction being received: a split commit covers its
	// changes up to it.
	unitKey replayKey
	// full is set when the open transaction reached maxRecords.
	full bool
	// covered is the position of the last complete Postgres transaction in
	// the open Kafka transaction; zero while there is none.
	covered StatePosition
	// safe is the highest slot position that may be confirmed: everything
	// before it is committed in Kafka (or was never routed).
	safe pglogrepl.LSN
	// dirty is set by an abort: the tracker counts acks of records the
	// abort threw away, so nothing past safe is confirmed until a new
	// session resets the tracker.
	dirty bool
	// skipEnd is the end LSN of the last unit the state topic shows
	// committed: every unit that ends at or before it is in Kafka already
	// (unitCovered).
	skipEnd pglogrepl.LSN
	// skipSplit is the prefix of a Postgres transaction after skipEnd
	// that the state topic shows committed (a split): its changes are
	// skipped too.
	skipSplit SplitPosition
	// base is the last whole position committed, or the last unit that
	// ended while no Kafka transaction was open (all its records
	// committed before): what a split commit records as its end when its
	// Kafka transaction holds no whole Postgres transaction.
	base StatePosition
	// server is the history of the server this session streams from;
	// positions are committed with it and checked against it.
	server serverHistory
	// lastCommitted is the position of this process's last commit.
	lastCommitted StatePosition
	// sessions counts the sessions started; replaced is set once the
	// client of the previous one was closed (eosFreshProducer).
	sessions int
	replaced bool
	// skipped counts the Postgres transactions skipped this session.
	skipped int
	// fenced is set once another producer took over the transactional id;
	// from then on nothing is committed or confirmed. Set from promise
	// callbacks too.
	fenced atomic.Bool

	// abortReq is a produce error that makes the open transaction
	// uncommittable; the loop aborts it and restarts the session.
	abortReq atomic.Pointer[error]

	// divert holds the keys of records Kafka refused for what they are
	// (too large, invalid) when a dead-letter topic is set: the transaction
	// they were in is aborted, and on the replay they go to the dead-letter
	// topic in their place, so the retry cannot refuse them again.
	divertMu sync.Mutex
	divert   map[replayKey]error
}

func newEOSState(cfg Config, txp TxnProducer, reg prometheus.Registerer) *eosState {
	return &eosState{
		txp:          txp,
		state:        cfg.State,
		txnID:        cfg.transactionalID(),
		maxRecords:   cfg.TransactionMaxRecords,
		maxInterval:  cfg.TransactionMaxInterval,
		splitRecords: cfg.TransactionSplitRecords,
		timeout:      cfg.TransactionTimeout,
		phase:        cfg.TxnPhase,
		m:            newEOSMetrics(reg),
		divert:       map[replayKey]error{},
	}
}

// timedOut reports whether the Kafka transaction begun last has been open
// for the transaction timeout: a fence error then means, most likely, that
// the broker aborted it for its age (and bumped the epoch), not that
// another producer took the id over. Either way restarting the session is
// safe: the new session streams only once it holds the slot, which no
// other walbox can hold at the same time, and loads the producer id afresh.
// Safe for concurrent use.
func (e *eosState) timedOut() bool {
	start := e.txnStart.Load()
	return start != 0 && e.timeout > 0 && time.Since(time.Unix(0, start)) >= e.timeout
}

// timeoutAbort is the cause of a session restart after the broker aborted
// a Kafka transaction older than the timeout.
func (e *eosState) timeoutAbort(err error) error {
	if errors.Is(err, errTimedOut) {
		return err
	}
	return fmt.Errorf("%w: the kafka transaction of %q was open %s, at least the transaction timeout (%s), so the broker aborted it: %w; the session restarts from the committed position. A Postgres transaction is committed in parts before half the timeout (--transaction-split-records), so a Kafka stall or a slow flush caused it: if it repeats, raise --transaction-timeout (at most the brokers' transaction.max.timeout.ms)",
		errTimedOut, e.txnID, time.Since(time.Unix(0, e.txnStart.Load())).Round(time.Millisecond), e.timeout, err)
}

func (e *eosState) hook(phase string) {
	if e.phase != nil {
		e.phase(phase)
	}
}

// pendingCommit is a commit running in its goroutine.
type pendingCommit struct {
	done    chan error
	covered StatePosition
	records int
	start   time.Time
}

// confirmable caps the tracker's position at what Kafka committed.
func (e *eosState) confirmable(tracked pglogrepl.LSN) pglogrepl.LSN {
	if e.open || e.committing != nil || e.dirty {
		return min(tracked, e.safe)
	}
	e.safe = max(e.safe, tracked)
	return e.safe
}

// requestAbort records err as the reason the open transaction cannot
// commit, and wakes the loop. Safe for concurrent use.
func (e *eosState) requestAbort(err error, wake chan struct{}) {
	e.abortReq.CompareAndSwap(nil, &err)
	select {
	case wake <- struct{}{}:
	default:
	}
}

func (e *eosState) divertErr(k replayKey) error {
	e.divertMu.Lock()
	defer e.divertMu.Unlock()
	return e.divert[k]
}

func (e *eosState) addDivert(k replayKey, err error) {
	e.divertMu.Lock()
	e.divert[k] = err
	e.divertMu.Unlock()
}

// forgetDiverted drops the diverted keys of the changes a commit covered,
// the commit's position being pos: the units ending at or before its end,
// and the split prefix.
func (e *eosState) forgetDiverted(pos StatePosition) {
	e.divertMu.Lock()
	for k := range e.divert {
		if unitCovered(k, pos.EndLSN) || pos.Split.covers(k) {
			delete(e.divert, k)
		}
	}
	e.divertMu.Unlock()
}

// errTimedOut marks an abort request that timeoutAbort already explained.
var errTimedOut = errors.New("kafka transaction timed out")

type eosMetrics struct {
	timeouts   prometheus.Counter
	splits     prometheus.Counter
	committed  prometheus.Counter
	aborted    prometheus.Counter
	records    prometheus.Histogram
	commitTime prometheus.Histogram
	stateLSN   prometheus.Gauge
	skipped    prometheus.Counter
}

func newEOSMetrics(reg prometheus.Registerer) *eosMetrics {
	f := promauto.With(reg)
	txns := f.NewCounterVec(prometheus.CounterOpts{
		Name: "walbox_kafka_transactions_total",
		Help: "Kafka transactions ended (--delivery exactly-once), by result: committed or aborted.",
	}, []string{"result"})
	return &eosMetrics{
		timeouts: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_kafka_transaction_timeouts_total",
			Help: "Kafka transactions the broker aborted because they were open longer than the transaction timeout (--transaction-timeout); each restarts the session from the committed position.",
		}),
		splits: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_kafka_transaction_splits_total",
			Help: "Kafka transactions committed inside a Postgres transaction too large for one (--transaction-split-records, or half of --transaction-timeout): read_committed consumers see that Postgres transaction in several parts.",
		}),
		committed: txns.WithLabelValues("committed"),
		aborted:   txns.WithLabelValues("aborted"),
		records: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "walbox_kafka_transaction_records",
			Help:    "Outbox records per committed Kafka transaction (the state record not counted).",
			Buckets: prometheus.ExponentialBuckets(1, 4, 10),
		}),
		commitTime: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "walbox_kafka_transaction_commit_seconds",
			Help:    "Time from the start of a Kafka transaction's flush to the end of its commit (EndTransaction). WAL is still read meanwhile; the records routed wait for the next transaction, counted against the in-flight limits.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30},
		}),
		stateLSN: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_state_commit_lsn_bytes",
			Help: "Commit LSN of the last Postgres transaction covered by a committed Kafka transaction, as the state topic holds it, in bytes.",
		}),
		skipped: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_transactions_skipped_total",
			Help: "Postgres transactions, and dead-lettered non-transactional outbox messages, that the slot sent again and the state topic shows committed in Kafka already: not produced again.",
		}),
	}
}

// unitCovered reports whether the unit of key (a Postgres transaction, or a
// dead-lettered non-transactional message when key.ord is
// nonTransactional) ends at or before end, the end LSN of a committed
// position.
//
// Units are ordered by where they end, never by their commit LSNs, which can
// collide: a non-transactional message's unit is at the end of its WAL
// record, which is where the next record starts, and that can be the next
// transaction's commit record (seen on real Postgres: both 0/15055C0). Ends
// cannot collide: every unit ends at the end of a WAL record of its own. A
// transaction's end is not known before its Commit message, but no record
// ends inside its commit record, so it ends at or before end exactly when
// its commit LSN is below end; a message's unit ends at its LSN.
func unitCovered(key replayKey, end pglogrepl.LSN) bool {
	if key.ord == nonTransactional {
		return key.commit <= end
	}
	return key.commit < end
}

// eosSkips reports whether the unit of key (a change's transaction, or a
// non-transactional message) is in Kafka already.
func (l *loop) eosSkips(key replayKey) bool {
	return l.eos != nil && (unitCovered(key, l.eos.skipEnd) || l.eos.skipSplit.covers(key))
}

// eosStartSession runs before a session streams: it aborts a transaction a
// failed abort left open, loads the producer id (fencing a predecessor) and
// reads the committed position.
func (r *Relay) eosStartSession(ctx context.Context) error {
	e := r.eos
	// Records acknowledged in a Kafka transaction this process never saw
	// commit are not counted as delivered.
	r.sent.aborted()
	if err := r.eosFreshProducer(ctx); err != nil {
		return err
	}
	if e.begun || e.open {
		if err := r.eosAbortTxn(ctx); err != nil {
			return err
		}
	}
	if _, _, err := e.txp.ProducerID(ctx); err != nil {
		if isFenced(err) {
			return r.eosFenced(err)
		}
		return &txnAbortedError{fmt.Errorf("load the producer id of transactional id %q: %w", e.txnID, err)}
	}
	// Bounded, so that a broker that stops answering makes the session
	// retry rather than hang.
	sctx, cancel := context.WithTimeout(ctx, stateReadTimeout)
	defer cancel()
	if err := e.state.Ensure(sctx, r.log); err != nil {
		if errors.Is(err, ErrStateTopic) {
			return err // only an operator can fix it
		}
		return &txnAbortedError{err}
	}
	pos, err := e.state.Last(sctx, e.txnID)
	if err != nil {
		return &txnAbortedError{fmt.Errorf("read the committed position of %q from the state topic %q: %w", e.txnID, e.state.Topic(), err)}
	}
	if r.followed {
		// Committed while the session decoded a standby that was then
		// promoted under it: recorded with the history the session
		// began on, they are positions of the server's history.
		for _, p := range []*StatePosition{&pos, &e.lastCommitted} {
			if p.History == r.followedFrom {
				p.History = e.server.History
			}
		}
	}
	if e.lastCommitted.supersedes(pos) {
		// Never older than what this process committed itself, whatever
		// the read saw (a compaction race, a lagging replica).
		pos = e.lastCommitted
	}
	skipEnd, warning, err := resumeFrom(pos, e.server)
	if err != nil {
		var hm *HistoryMismatchError
		if errors.As(err, &hm) {
			hm.TransactionalID, hm.StateTopic = e.txnID, e.state.Topic()
		}
		return err
	}
	split, swarning, err := resumeSplit(pos, e.server, skipEnd)
	if err != nil {
		var hm *HistoryMismatchError
		if errors.As(err, &hm) {
			hm.TransactionalID, hm.StateTopic = e.txnID, e.state.Topic()
		}
		return err
	}
	for _, w := range []string{warning, swarning} {
		if w != "" {
			r.log.Warn(w, "transactional_id", e.txnID, "state_topic", e.state.Topic(),
				"state_history", pos.History.String(), "server_history", e.server.History.String())
		}
	}
	e.skipEnd, e.skipSplit = skipEnd, split
	e.base = StatePosition{CommitLSN: pos.CommitLSN, EndLSN: skipEnd}
	if skipEnd != pos.EndLSN {
		// Only up to a timeline switch point is in this history.
		e.base.CommitLSN = skipEnd
	}
	if !split.IsZero() {
		r.log.Info("exactly-once: resuming inside a postgres transaction split across kafka transactions: its first changes are committed in Kafka and are skipped",
			"transactional_id", e.txnID, "commit_lsn", split.CommitLSN.String(), "changes", split.Changes)
	}
	e.skipped = 0
	e.dirty = false
	if pos.CommitLSN != 0 {
		e.m.stateLSN.Set(float64(pos.CommitLSN))
	}
	r.log.Info("exactly-once: committed position read from the state topic", "transactional_id", e.txnID,
		"state_topic", e.state.Topic(), "commit_lsn", pos.CommitLSN.String(), "end_lsn", pos.EndLSN.String(),
		"confirmed_lsn", e.safe.String())
	return nil
}

// eosFreshProducer gives every session after the first a new transactional
// client (Config.NewTxnProducer), so that the session loads the producer id
// afresh: after a peer held the slot (standby), the cached epoch is stale.
// The transaction the old client left open needs no abort request: loading
// the id with the new client aborts whatever is open under it.
func (r *Relay) eosFreshProducer(ctx context.Context) error {
	e := r.eos
	e.sessions++
	if e.sessions == 1 || r.cfg.NewTxnProducer == nil {
		return nil
	}
	if !e.replaced {
		e.begun = false
		if err := r.eosAbortTxn(ctx); err != nil { // only drops the queue now
			return err
		}
		if c, ok := e.txp.(interface{ Close() }); ok {
			c.Close()
		}
		e.replaced = true
	}
	txp, err := r.cfg.NewTxnProducer()
	if err != nil {
		return &txnAbortedError{fmt.Errorf("create a new transactional kafka client for %q: %w", e.txnID, err)}
	}
	e.txp, r.producer, e.replaced = txp, txp, false
	return nil
}

// stateReadTimeout bounds creating and reading the state topic at the start
// of a session.
const stateReadTimeout = time.Minute

// eosFenced stops the relay: another producer owns the transactional id.
// Safe for concurrent use.
func (r *Relay) eosFenced(err error) error {
	r.eos.fenced.Store(true)
	var ferr *FencedError
	if errors.As(err, &ferr) {
		// Already reported (a promise saw it first): wrapping it
		// again would repeat the whole advice.
		r.fail(ferr)
		return ferr
	}
	ferr = &FencedError{TransactionalID: r.eos.txnID, Timeout: r.eos.timeout, Err: err}
	r.fail(ferr)
	return ferr
}

// eosAbortTxn aborts the open transaction and drops the queue. A failure
// leaves it marked begun, so the next session tries again before
// producing. No commit may be running.
func (r *Relay) eosAbortTxn(ctx context.Context) error {
	e := r.eos
	for _, rec := range e.queue {
		r.inflight.release(rec.Context.(*inflightRecord).size)
	}
	clear(e.queue)
	e.queue = e.queue[:0]
	e.dirty = true
	// After the purge below: no ack of its records comes later.
	defer r.sent.aborted()
	wasOpen := e.open || e.begun
	e.open, e.full = false, false
	e.records, e.unitRecords, e.covered, e.unitKey = 0, 0, StatePosition{}, replayKey{}
	if e.begun {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
		defer cancel()
		err := e.txp.AbortBufferedRecords(actx)
		if err == nil {
			err = e.txp.EndTransaction(actx, kgo.TryAbort)
		}
		if err != nil {
			if isFenced(err) && !e.timedOut() {
				e.begun = false
				return r.eosFenced(err)
			}
			if isFenced(err) {
				// The broker aborted it already; the next session's
				// producer id load starts afresh.
				e.begun = false
				e.m.aborted.Inc()
				return &txnAbortedError{e.timeoutAbort(err)}
			}
			return &txnAbortedError{fmt.Errorf("abort the kafka transaction of %q: %w", e.txnID, err)}
		}
		e.begun = false
	}
	if wasOpen {
		e.m.aborted.Inc()
	}
	return nil
}

// eosAbort aborts the open transaction because of cause and returns the
// error that restarts the session from the committed position.
func (l *loop) eosAbort(ctx context.Context, cause error) error {
	e := l.eos
	l.log.Warn("aborting the kafka transaction; the session restarts from the committed position",
		"transactional_id", e.txnID, "records", e.records, "err", cause)
	if errors.Is(cause, errTimedOut) {
		e.m.timeouts.Inc()
	}
	// Cleared even if the abort fails: the next session aborts again
	// before producing, and must not take this cause for a new one.
	e.abortReq.Store(nil)
	if err := l.eosAbortTxn(ctx); err != nil {
		return err
	}
	if ferr := l.failureErr(); ferr != nil {
		return ferr
	}
	return &txnAbortedError{cause}
}

// eosBegin begins the Kafka transaction if it is not yet.
func (l *loop) eosBegin() {
	e := l.eos
	if e.begun {
		return
	}
	e.txnStart.Store(time.Now().UnixNano())
	if err := e.txp.BeginTransaction(); err != nil {
		if isFenced(err) {
			_ = l.eosFenced(err)
		} else {
			l.fail(fmt.Errorf("begin a kafka transaction (transactional id %q): %w", e.txnID, err))
		}
	}
	e.begun = true
}

// eosProduce counts a record into the open transaction and reports whether
// it may be produced now; while a commit runs it is queued instead.
func (l *loop) eosProduce(rec *kgo.Record) bool {
	e := l.eos
	if !e.open {
		e.open = true
		e.began = time.Now()
	}
	e.records++
	e.unitRecords++
	if m, ok := rec.Context.(*inflightRecord); ok && m.key.ord != nonTransactional {
		e.unitKey = m.key
	}
	if e.committing != nil {
		e.queue = append(e.queue, rec)
		return false
	}
	l.eosBegin()
	return true
}

// eosUnitDone runs when a Postgres transaction (or a dead-lettered
// non-transactional message) is complete: it is now covered by the open
// Kafka transaction, which is committed when a bound is reached.
// key names the unit (replayKey{commit: lsn, ord: nonTransactional} for a
// message), end is where it ends.
func (l *loop) eosUnitDone(key replayKey, end pglogrepl.LSN) {
	e := l.eos
	commit := key.commit
	if unitCovered(key, e.skipEnd) {
		e.skipped++
		e.m.skipped.Inc()
		if e.skipped == 1 {
			l.log.Info("exactly-once: skipping transactions the state topic shows committed in Kafka",
				"transactional_id", e.txnID, "commit_lsn", commit.String(), "committed_up_to", e.skipEnd.String())
		}
		if end == e.skipEnd {
			l.log.Info("exactly-once: skipped every transaction committed in Kafka before this session",
				"transactional_id", e.txnID, "skipped", e.skipped, "commit_lsn", commit.String())
		}
		return
	}
	e.unitRecords = 0
	e.unitKey = replayKey{}
	if !e.skipSplit.IsZero() && key.ord != nonTransactional && commit >= e.skipSplit.CommitLSN {
		e.skipSplit = SplitPosition{} // the split transaction is past
	}
	if !e.open {
		// None of its records is in the open Kafka transaction (there
		// is none): they are in one committed or committing, and a
		// later commit succeeds only after that one did. A split commit
		// holding no whole Postgres transaction records this as its
		// end (eosSplitPosition): the last part of a split transaction
		// may have ended at its last record.
		e.base = StatePosition{CommitLSN: commit, EndLSN: end}
		return
	}
	e.covered = StatePosition{CommitLSN: commit, EndLSN: end}
	if e.records >= e.maxRecords {
		e.full = true // committed by eosTick, before the next receive
	}
}

// eosCommitDue reports when the open transaction must be committed by
// time, the zero time if it need not be (or cannot be yet). Inside a
// Postgres transaction only a split is due (eosSplitDue).
func (l *loop) eosCommitDue() time.Time {
	e := l.eos
	if e == nil || !e.open || e.committing != nil {
		return time.Time{}
	}
	if e.unitRecords > 0 || e.covered.EndLSN == 0 {
		return l.eosSplitDue()
	}
	if e.full {
		return e.began // due now
	}
	return e.began.Add(e.interval())
}

// interval is how long a Kafka transaction of whole Postgres transactions
// stays open: maxInterval, but at most half the transaction timeout, the
// bound a split transaction gets too (eosSplitDue). An interval at or above
// the timeout would let the broker abort every transaction that does not
// fill up first, on every session again.
func (e *eosState) interval() time.Duration {
	if e.timeout > 0 && e.maxInterval > e.timeout/2 {
		return e.timeout / 2
	}
	return e.maxInterval
}

// wakeAt is when the loop must stop waiting for WAL: the next status
// update, or an exactly-once commit that is due earlier. (A commit that
// ends interrupts the wait itself.)
func (l *loop) wakeAt() time.Time {
	if due := l.eosCommitDue(); !due.IsZero() && due.Before(l.nextStatus) {
		return due
	}
	return l.nextStatus
}

// eosTick finishes a commit that returned, aborts a transaction a produce
// error spoiled, and starts the commit of one that is due. The loop calls
// it between receives.
func (l *loop) eosTick(ctx context.Context) error {
	e := l.eos
	if c := e.committing; c != nil {
		select {
		case err := <-c.done:
			if err := l.eosCommitted(ctx, c, err); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	if p := e.abortReq.Load(); p != nil {
		return l.eosAbort(ctx, *p)
	}
	if due := l.eosCommitDue(); !due.IsZero() && !time.Now().Before(due) {
		l.eosStartCommit(ctx)
	}
	return nil
}

// eosStartCommit produces the state record into the open transaction and
// starts its flush and commit in a goroutine; eosCommitted finishes it in
// the loop. The goroutine touches nothing the loop owns.
func (l *loop) eosStartCommit(ctx context.Context) {
	e := l.eos
	c := &pendingCommit{done: make(chan error, 1), covered: e.covered, records: e.records, start: time.Now()}
	l.eosSplitPosition(c)
	c.covered.History = e.server.History
	e.txp.Produce(l.produceCtx, stateRecord(e.state.Topic(), e.txnID, c.covered, c.records), l.eosStatePromise)
	e.committing = c
	e.open, e.begun, e.full = false, false, false
	e.records, e.covered = 0, StatePosition{}
	conn := l.conn
	wake := l.inflight.wake
	go func() {
		err := l.eosCommitRun(ctx, c)
		if conn != nil {
			// Interrupt the loop's wait for WAL: the queue is to be
			// produced and the slot confirmed now.
			_ = conn.Conn().SetReadDeadline(time.Now())
		}
		c.done <- err
		select {
		case wake <- struct{}{}:
		default:
		}
	}()
}

// eosCommitRun flushes the committing transaction and commits it. It runs
// in the commit goroutine.
func (l *loop) eosCommitRun(ctx context.Context, c *pendingCommit) error {
	e := l.eos
	if err := e.txp.Flush(ctx); err != nil {
		return fmt.Errorf("flush the kafka transaction: %w", err)
	}
	if err := l.failureErr(); err != nil {
		return err
	}
	if p := e.abortReq.Load(); p != nil {
		return *p
	}
	e.hook(PhaseProduced)
	// A cancelled EndTransaction leaves the outcome unknown: never cancel
	// it (franz-go's advice); the broker's request timeout bounds it.
	if err := e.txp.EndTransaction(context.WithoutCancel(ctx), kgo.TryCommit); err != nil {
		return fmt.Errorf("commit the kafka transaction: %w", err)
	}
	e.hook(PhaseCommitted)
	return nil
}

// eosCommitted finishes a commit in the loop: on success the slot is
// confirmed to what it covers and the queued records go into a new
// transaction; on failure the transaction is aborted.
func (l *loop) eosCommitted(ctx context.Context, c *pendingCommit, err error) error {
	e := l.eos
	e.committing = nil
	l.readDeadline = time.Time{} // the goroutine moved the socket's deadline
	if err != nil {
		// The committing transaction is still open on the broker.
		e.begun = true
		if isFenced(err) && !e.timedOut() {
			ferr := l.eosFenced(err)
			_ = l.eosAbortTxn(ctx)
			return ferr
		}
		if e.timedOut() {
			// Fenced (older brokers: INVALID_PRODUCER_EPOCH,
			// PRODUCER_FENCED) or INVALID_TXN_STATE (Kafka 4 with
			// transaction.version 2): the broker aborted it.
			err = e.timeoutAbort(err)
		}
		return l.eosAbort(ctx, err)
	}
	e.m.committed.Inc()
	e.m.commitTime.Observe(time.Since(c.start).Seconds())
	e.m.records.Observe(float64(c.records))
	e.m.stateLSN.Set(float64(c.covered.CommitLSN))
	if !c.covered.Split.IsZero() {
		e.m.splits.Inc()
	}
	e.lastCommitted = c.covered
	l.sent.committed()
	if c.covered.EndLSN >= e.base.EndLSN {
		// Not if a unit ended since the commit started (eosUnitDone).
		e.base = StatePosition{CommitLSN: c.covered.CommitLSN, EndLSN: c.covered.EndLSN}
	}
	e.forgetDiverted(c.covered)
	// Everything before the end of the last whole Postgres transaction it
	// covers is in Kafka now, or was never routed; never a position inside
	// a split one.
	e.safe = max(e.safe, c.covered.EndLSN)
	if l.conn == nil {
		// Unit tests drive the loop without a replication connection.
		e.confirmable(l.tracker.Confirmed())
	} else if err := l.sendStatus(ctx); err != nil {
		return err
	}
	e.hook(PhaseConfirmed)
	if len(e.queue) > 0 {
		l.eosBegin()
		for _, rec := range e.queue {
			l.producer.Produce(l.produceCtx, rec, l.promise)
		}
		clear(e.queue)
		e.queue = e.queue[:0]
	}
	return nil
}

// eosWaitCommit waits for a running commit and finishes it.
func (l *loop) eosWaitCommit(ctx context.Context) error {
	c := l.eos.committing
	if c == nil {
		return nil
	}
	return l.eosCommitted(ctx, c, <-c.done)
}

// eosStatePromise settles the state record.
func (l *loop) eosStatePromise(_ *kgo.Record, err error) {
	if err == nil || errors.Is(err, kgo.ErrAborting) {
		return
	}
	if isFenced(err) && l.eos.timedOut() {
		l.eos.requestAbort(l.eos.timeoutAbort(err), l.inflight.wake)
		return
	}
	if isFenced(err) {
		_ = l.eosFenced(err)
		return
	}
	l.eos.requestAbort(fmt.Errorf("produce the state record to %q: %w", l.eos.state.Topic(), err), l.inflight.wake)
}

// eosSettleCommit runs before a session drains its in-flight records on
// stop or failure: a running commit is waited for, so that the queued
// records are produced (or dropped by an abort).
func (l *loop) eosSettleCommit(ctx context.Context) {
	if err := l.eosWaitCommit(ctx); err != nil {
		l.log.Warn("the last kafka transaction did not commit; the next start sends it again", "err", err)
	}
}

// eosFinish ends the open transaction when the session stops, after the
// drain: it commits it if it holds only whole Postgres transactions and
// nothing failed, otherwise aborts it.
func (l *loop) eosFinish(ctx context.Context) {
	e := l.eos
	if e.fenced.Load() {
		return
	}
	l.eosSettleCommit(ctx)
	if !e.open && !e.begun {
		return
	}
	if e.unitRecords > 0 || e.covered.EndLSN == 0 || l.failureErr() != nil || e.abortReq.Load() != nil {
		cause := errors.New("the session ended inside a postgres transaction")
		if err := l.failureErr(); err != nil {
			cause = err
		} else if p := e.abortReq.Load(); p != nil {
			cause = *p
		}
		_ = l.eosAbort(ctx, cause)
		return
	}
	l.eosStartCommit(ctx)
	l.eosSettleCommit(ctx)
}

// eosSettleError handles a record Kafka refused inside a transaction.
// Every refusal makes the transaction uncommittable, so it is aborted; what
// then happens to the record decides whether a retry can succeed.
func (l *loop) eosSettleError(rec *kgo.Record, m *inflightRecord, err error) {
	l.inflight.release(m.size)
	if errors.Is(err, kgo.ErrAborting) {
		return // thrown away by our own abort
	}
	l.metrics.produceErrors.Inc()
	e := l.eos
	switch {
	case isFenced(err) && e.timedOut():
		e.requestAbort(e.timeoutAbort(err), l.inflight.wake)
	case isFenced(err):
		_ = l.eosFenced(err)
	case tooLarge(err) && !l.recordTooLarge(rec):
		l.fail(&ProduceError{Topic: rec.Topic, EventID: m.eventID, LSN: m.lsn, Err: fmt.Errorf(
			"%w; the record itself is %d bytes, so its batch was refused: the topic's max.message.bytes is below --producer-batch-max-bytes (%d), lower that flag to at most the topic's limit",
			err, recordSize(rec), l.cfg.MaxBatchBytes)})
	case recordRejected(err) && l.cfg.DeadLetterTopic != "" && !m.deadLetter:
		// Retried as is, it would be refused again, forever: the replay
		// sends it to the dead-letter topic instead (eosDivert).
		e.addDivert(m.key, err)
		e.requestAbort(fmt.Errorf("kafka refused event %q (lsn %s) for topic %q: %w; it goes to the dead-letter topic on the retry", m.eventID, m.lsn, rec.Topic, err), l.inflight.wake)
	case recordRejected(err) || operatorError(err):
		l.fail(&ProduceError{Topic: rec.Topic, EventID: m.eventID, LSN: m.lsn, Err: err})
	default:
		e.requestAbort(fmt.Errorf("produce event %q (lsn %s) to %q: %w", m.eventID, m.lsn, rec.Topic, err), l.inflight.wake)
	}
}

// operatorError reports produce errors only an operator can fix; retrying
// them would loop.
func operatorError(err error) bool {
	return errors.Is(err, kerr.TopicAuthorizationFailed) || errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) ||
		errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID) ||
		// A commit time older than the topic's
		// message.timestamp.before.max.ms: the replay after the abort
		// carries the same timestamp and is refused again.
		errors.Is(err, kerr.InvalidTimestamp)
}

// eosDivert replaces a record Kafka refused in an aborted transaction by its
// dead-letter record.
func (l *loop) eosDivert(rec *kgo.Record, m *inflightRecord) *kgo.Record {
	if m.deadLetter {
		return rec
	}
	err := l.eos.divertErr(m.key)
	if err == nil {
		return rec
	}
	m.deadLetter = true
	l.log.Warn("kafka refused an outbox record; routed to the dead-letter topic",
		"event_id", m.eventID, "lsn", m.lsn.String(), "xid", m.xid, "topic", rec.Topic,
		"dead_letter_topic", l.cfg.DeadLetterTopic, "err", err)
	return router.RefusedRecord(rec, m.origin(), l.cfg.DeadLetterTopic,
		fmt.Sprintf("kafka refused the record for topic %q (%d bytes): %v", rec.Topic, len(rec.Value), err),
		tooLarge(err))
}

// eosEndSession runs when a session ends: a running commit is finished
// (its outcome stands, whatever ended the session), and a transaction left
// open is aborted; the next session produces it again.
func (l *loop) eosEndSession(ctx context.Context) {
	if l.eos.fenced.Load() {
		return
	}
	if err := l.eosWaitCommit(ctx); err != nil && !isTxnAborted(err) {
		l.log.Warn("could not finish the kafka transaction that was committing when the session ended; whatever is not committed and confirmed is sent again by the next session (the state topic skips what is committed)", "err", err)
	}
	if l.eos.open || l.eos.begun {
		_ = l.eosAbort(ctx, errors.New("the replication session ended"))
	}
}
