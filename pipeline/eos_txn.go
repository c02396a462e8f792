package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/checkpoint"
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
// flush and the commit run in a goroutine of their own (startCommit)
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
// every field except abortReq and the diverted set, which promise callbacks
// write.
type eosState struct {
	// fails, inflight and sent are the relay's: a fence fails it, an
	// abort releases the queued records and forgets their acks.
	fails         *failState
	inflight      *inflight
	sent          *sentLedger
	cfg           *Config
	log           *slog.Logger
	produceErrors prometheus.Counter
	// link and produceCtx are the current session's (bind).
	link       sessionLink
	produceCtx context.Context

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
	// client of the previous one was closed (freshProducer).
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

	// diverted holds the keys of records Kafka refused for what they are
	// (too large, invalid) when a dead-letter topic is set: the transaction
	// they were in is aborted, and on the replay they go to the dead-letter
	// topic in their place, so the retry cannot refuse them again.
	divertMu sync.Mutex
	diverted map[replayKey]error
}

func newEOSState(cfg *Config, txp TxnProducer, reg prometheus.Registerer, log *slog.Logger, fails *failState, inf *inflight, sent *sentLedger, produceErrors prometheus.Counter) *eosState {
	return &eosState{
		cfg:           cfg,
		log:           log,
		produceErrors: produceErrors,
		fails:         fails,
		inflight:      inf,
		sent:          sent,
		txp:           txp,
		state:         cfg.State,
		txnID:         cfg.transactionalID(),
		maxRecords:    cfg.TransactionMaxRecords,
		maxInterval:   cfg.TransactionMaxInterval,
		splitRecords:  cfg.TransactionSplitRecords,
		timeout:       cfg.TransactionTimeout,
		phase:         cfg.TxnPhase,
		m:             newEOSMetrics(reg),
		diverted:      map[replayKey]error{},
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
	return e.diverted[k]
}

func (e *eosState) addDivert(k replayKey, err error) {
	e.divertMu.Lock()
	e.diverted[k] = err
	e.divertMu.Unlock()
}

// forgetDiverted drops the diverted keys of the changes a commit covered,
// the commit's position being pos: the units ending at or before its end,
// and the split prefix.
func (e *eosState) forgetDiverted(pos StatePosition) {
	e.divertMu.Lock()
	for k := range e.diverted {
		if unitCovered(k, pos.EndLSN) || pos.Split.covers(k) {
			delete(e.diverted, k)
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

// skips reports whether the unit of key (a change's transaction, or a
// non-transactional message) is in Kafka already.
func (e *eosState) skips(key replayKey) bool {
	return unitCovered(key, e.skipEnd) || e.skipSplit.covers(key)
}

// startSession runs before a session streams from srv, once it holds the
// slot: only then does loading the producer id fence any other producer
// with this transactional id (resume). The producer it returns is the
// transactional client, replaced for every session after the first.
func (e *eosState) startSession(ctx context.Context, _ Producer, srv serverHistory, followedFrom *History) (Producer, error) {
	e.server = srv
	err := e.resume(ctx, followedFrom)
	return e.txp, err
}

// resume aborts a transaction a failed abort left open, loads the producer
// id (fencing a predecessor) and reads the committed position.
func (e *eosState) resume(ctx context.Context, followedFrom *History) error {
	if c := e.committing; c != nil {
		// Left running by a session that was fenced (endSession does
		// not wait for it; flushLostSession purged its records since):
		// it is the fenced client's and cannot commit. It is forgotten
		// once it ended, before its client is replaced, so that this
		// session does not finish it on its first tick and take its
		// failure for a new fence.
		e.committing = nil
		select {
		case err := <-c.done:
			e.log.Info("exactly-once: the commit running when this instance was fenced ended; resuming from the state topic", "transactional_id", e.txnID, "err", err)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	// Records acknowledged in a Kafka transaction this process never saw
	// commit are not counted as delivered.
	e.sent.aborted()
	if err := e.freshProducer(ctx); err != nil {
		return err
	}
	if e.begun || e.open {
		if err := e.abortTxn(ctx); err != nil {
			return err
		}
	}
	if _, _, err := e.txp.ProducerID(ctx); err != nil {
		if isFenced(err) {
			return e.fence(err)
		}
		return &txnAbortedError{fmt.Errorf("load the producer id of transactional id %q: %w", e.txnID, err)}
	}
	// Bounded, so that a broker that stops answering makes the session
	// retry rather than hang.
	sctx, cancel := context.WithTimeout(ctx, stateReadTimeout)
	defer cancel()
	if err := e.state.Ensure(sctx, e.log); err != nil {
		if errors.Is(err, ErrStateTopic) {
			return err // only an operator can fix it
		}
		return &txnAbortedError{err}
	}
	pos, err := e.state.Last(sctx, e.txnID)
	if err != nil {
		return &txnAbortedError{fmt.Errorf("read the committed position of %q from the state topic %q: %w", e.txnID, e.state.Topic(), err)}
	}
	if followedFrom != nil {
		// Committed while the session decoded a standby that was then
		// promoted under it: recorded with the history the session
		// began on, they are positions of the server's history.
		for _, p := range []*StatePosition{&pos, &e.lastCommitted} {
			if p.History == *followedFrom {
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
			e.log.Warn(w, "transactional_id", e.txnID, "state_topic", e.state.Topic(),
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
		e.log.Info("exactly-once: resuming inside a postgres transaction split across kafka transactions: its first changes are committed in Kafka and are skipped",
			"transactional_id", e.txnID, "commit_lsn", split.CommitLSN.String(), "changes", split.Changes)
	}
	e.skipped = 0
	e.dirty = false
	if pos.CommitLSN != 0 {
		e.m.stateLSN.Set(float64(pos.CommitLSN))
	}
	e.log.Info("exactly-once: committed position read from the state topic", "transactional_id", e.txnID,
		"state_topic", e.state.Topic(), "commit_lsn", pos.CommitLSN.String(), "end_lsn", pos.EndLSN.String(),
		"confirmed_lsn", e.safe.String())
	return nil
}

// freshProducer gives every session after the first a new transactional
// client (Config.NewTxnProducer), so that the session loads the producer id
// afresh: after a peer held the slot (standby), the cached epoch is stale.
// The transaction the old client left open needs no abort request: loading
// the id with the new client aborts whatever is open under it.
func (e *eosState) freshProducer(ctx context.Context) error {
	e.sessions++
	if e.sessions == 1 || e.cfg.NewTxnProducer == nil {
		return nil
	}
	if !e.replaced {
		e.begun = false
		if err := e.abortTxn(ctx); err != nil { // only drops the queue now
			return err
		}
		if c, ok := e.txp.(interface{ Close() }); ok {
			c.Close()
		}
		e.replaced = true
	}
	txp, err := e.cfg.NewTxnProducer()
	if err != nil {
		return &txnAbortedError{fmt.Errorf("create a new transactional kafka client for %q: %w", e.txnID, err)}
	}
	e.txp, e.replaced = txp, false
	return nil
}

// stateReadTimeout bounds creating and reading the state topic at the start
// of a session.
const stateReadTimeout = time.Minute

// fence stops the relay: another producer owns the transactional id.
// Safe for concurrent use.
func (e *eosState) fence(err error) error {
	e.fenced.Store(true)
	var ferr *FencedError
	if errors.As(err, &ferr) {
		// Already reported (a promise saw it first): wrapping it
		// again would repeat the whole advice.
		e.fails.fail(ferr)
		return ferr
	}
	ferr = &FencedError{TransactionalID: e.txnID, Timeout: e.timeout, Err: err}
	e.fails.fail(ferr)
	return ferr
}

// abortTxn aborts the open transaction and drops the queue. A failure
// leaves it marked begun, so the next session tries again before
// producing. No commit may be running.
func (e *eosState) abortTxn(ctx context.Context) error {
	for _, rec := range e.queue {
		e.inflight.release(rec.Context.(*inflightRecord).size)
	}
	clear(e.queue)
	e.queue = e.queue[:0]
	e.dirty = true
	// After the purge below: no ack of its records comes later.
	defer e.sent.aborted()
	wasOpen := e.open || e.begun
	e.open, e.full = false, false
	e.records, e.unitRecords, e.covered, e.unitKey = 0, 0, StatePosition{}, replayKey{}
	if e.begun {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.ShutdownTimeout)
		defer cancel()
		err := e.txp.AbortBufferedRecords(actx)
		if err == nil {
			err = e.txp.EndTransaction(actx, kgo.TryAbort)
		}
		if err != nil {
			if isFenced(err) && !e.timedOut() {
				e.begun = false
				return e.fence(err)
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

// abort aborts the open transaction because of cause and returns the
// error that restarts the session from the committed position.
func (e *eosState) abort(ctx context.Context, cause error) error {
	e.log.Warn("aborting the kafka transaction; the session restarts from the committed position",
		"transactional_id", e.txnID, "records", e.records, "err", cause)
	if errors.Is(cause, errTimedOut) {
		e.m.timeouts.Inc()
	}
	// Cleared even if the abort fails: the next session aborts again
	// before producing, and must not take this cause for a new one.
	e.abortReq.Store(nil)
	if err := e.abortTxn(ctx); err != nil {
		return err
	}
	if ferr := e.fails.failureErr(); ferr != nil {
		return ferr
	}
	return &txnAbortedError{cause}
}

// begin begins the Kafka transaction if it is not yet.
func (e *eosState) begin() {
	if e.begun {
		return
	}
	e.txnStart.Store(time.Now().UnixNano())
	if err := e.txp.BeginTransaction(); err != nil {
		if isFenced(err) {
			_ = e.fence(err)
		} else {
			e.fails.fail(fmt.Errorf("begin a kafka transaction (transactional id %q): %w", e.txnID, err))
		}
	}
	e.begun = true
}

// produce counts a record into the open transaction and reports whether
// it may be produced now; while a commit runs it is queued instead.
func (e *eosState) produce(rec *kgo.Record) bool {
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
	e.begin()
	return true
}

// unitDone runs when a Postgres transaction (or a dead-lettered
// non-transactional message) is complete: it is now covered by the open
// Kafka transaction, which is committed when a bound is reached.
// key names the unit (replayKey{commit: lsn, ord: nonTransactional} for a
// message), end is where it ends.
func (e *eosState) unitDone(key replayKey, end pglogrepl.LSN) {
	commit := key.commit
	if unitCovered(key, e.skipEnd) {
		e.skipped++
		e.m.skipped.Inc()
		if e.skipped == 1 {
			e.log.Info("exactly-once: skipping transactions the state topic shows committed in Kafka",
				"transactional_id", e.txnID, "commit_lsn", commit.String(), "committed_up_to", e.skipEnd.String())
		}
		if end == e.skipEnd {
			e.log.Info("exactly-once: skipped every transaction committed in Kafka before this session",
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
		// end (splitPosition): the last part of a split transaction
		// may have ended at its last record.
		e.base = StatePosition{CommitLSN: commit, EndLSN: end}
		return
	}
	e.covered = StatePosition{CommitLSN: commit, EndLSN: end}
	if e.records >= e.maxRecords {
		e.full = true // committed by tick, before the next receive
	}
}

// due reports when the open transaction must be committed by
// time, the zero time if it need not be (or cannot be yet). Inside a
// Postgres transaction only a split is due (splitDue).
func (e *eosState) due() time.Time {
	if !e.open || e.committing != nil {
		return time.Time{}
	}
	if e.unitRecords > 0 || e.covered.EndLSN == 0 {
		return e.splitDue()
	}
	if e.full {
		return e.began // due now
	}
	return e.began.Add(e.interval())
}

// interval is how long a Kafka transaction of whole Postgres transactions
// stays open: maxInterval, but at most half the transaction timeout, the
// bound a split transaction gets too (splitDue). An interval at or above
// the timeout would let the broker abort every transaction that does not
// fill up first, on every session again.
func (e *eosState) interval() time.Duration {
	if e.timeout > 0 && e.maxInterval > e.timeout/2 {
		return e.timeout / 2
	}
	return e.maxInterval
}

// tick finishes a commit that returned, aborts a transaction a produce
// error spoiled, and starts the commit of one that is due. The loop calls
// it between receives.
func (e *eosState) tick(ctx context.Context) error {
	if c := e.committing; c != nil {
		select {
		case err := <-c.done:
			if err := e.commitEnded(ctx, c, err); err != nil {
				return err
			}
		default:
			return nil
		}
	}
	if p := e.abortReq.Load(); p != nil {
		return e.abort(ctx, *p)
	}
	if due := e.due(); !due.IsZero() && !time.Now().Before(due) {
		e.startCommit(ctx)
	}
	return nil
}

// startCommit produces the state record into the open transaction and
// starts its flush and commit in a goroutine; commitEnded finishes it in
// the loop. The goroutine touches nothing the loop owns.
func (e *eosState) startCommit(ctx context.Context) {
	c := &pendingCommit{done: make(chan error, 1), covered: e.covered, records: e.records, start: time.Now()}
	e.splitPosition(c)
	c.covered.History = e.server.History
	e.txp.Produce(e.produceCtx, stateRecord(e.state.Topic(), e.txnID, c.covered, c.records), e.statePromise)
	e.committing = c
	e.open, e.begun, e.full = false, false, false
	e.records, e.covered = 0, StatePosition{}
	link := e.link
	wake := e.inflight.wake
	go func() {
		err := e.commitRun(ctx, c)
		// Interrupt the loop's wait for WAL: the queue is to be produced
		// and the slot confirmed now.
		link.interrupt()
		c.done <- err
		select {
		case wake <- struct{}{}:
		default:
		}
	}()
}

// commitRun flushes the committing transaction and commits it. It runs
// in the commit goroutine.
func (e *eosState) commitRun(ctx context.Context, c *pendingCommit) error {
	if err := e.txp.Flush(ctx); err != nil {
		return fmt.Errorf("flush the kafka transaction: %w", err)
	}
	if err := e.fails.failureErr(); err != nil {
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

// commitEnded finishes a commit in the loop: on success the slot is
// confirmed to what it covers and the queued records go into a new
// transaction; on failure the transaction is aborted.
func (e *eosState) commitEnded(ctx context.Context, c *pendingCommit, err error) error {
	e.committing = nil
	e.link.interrupted() // the goroutine moved the socket's deadline
	if err != nil {
		// The committing transaction is still open on the broker.
		e.begun = true
		if isFenced(err) && !e.timedOut() {
			ferr := e.fence(err)
			_ = e.abortTxn(ctx)
			return ferr
		}
		if e.timedOut() {
			// Fenced (older brokers: INVALID_PRODUCER_EPOCH,
			// PRODUCER_FENCED) or INVALID_TXN_STATE (Kafka 4 with
			// transaction.version 2): the broker aborted it.
			err = e.timeoutAbort(err)
		}
		return e.abort(ctx, err)
	}
	e.m.committed.Inc()
	e.m.commitTime.Observe(time.Since(c.start).Seconds())
	e.m.records.Observe(float64(c.records))
	e.m.stateLSN.Set(float64(c.covered.CommitLSN))
	if !c.covered.Split.IsZero() {
		e.m.splits.Inc()
	}
	e.lastCommitted = c.covered
	e.sent.committed()
	if c.covered.EndLSN >= e.base.EndLSN {
		// Not if a unit ended since the commit started (unitDone).
		e.base = StatePosition{CommitLSN: c.covered.CommitLSN, EndLSN: c.covered.EndLSN}
	}
	e.forgetDiverted(c.covered)
	// Everything before the end of the last whole Postgres transaction it
	// covers is in Kafka now, or was never routed; never a position inside
	// a split one.
	e.safe = max(e.safe, c.covered.EndLSN)
	if err := e.link.confirmNow(ctx); errors.Is(err, errNoConnection) {
		// Unit tests drive the loop without a replication connection.
		e.confirmable(e.link.tracked())
	} else if err != nil {
		return err
	}
	e.hook(PhaseConfirmed)
	if len(e.queue) > 0 {
		e.begin()
		for _, rec := range e.queue {
			e.link.send(rec)
		}
		clear(e.queue)
		e.queue = e.queue[:0]
	}
	return nil
}

// waitCommit waits for a running commit and finishes it.
func (e *eosState) waitCommit(ctx context.Context) error {
	c := e.committing
	if c == nil {
		return nil
	}
	return e.commitEnded(ctx, c, <-c.done)
}

// statePromise settles the state record.
func (e *eosState) statePromise(_ *kgo.Record, err error) {
	if err == nil || errors.Is(err, kgo.ErrAborting) {
		return
	}
	if isFenced(err) && e.timedOut() {
		e.requestAbort(e.timeoutAbort(err), e.inflight.wake)
		return
	}
	if isFenced(err) {
		_ = e.fence(err)
		return
	}
	e.requestAbort(fmt.Errorf("produce the state record to %q: %w", e.state.Topic(), err), e.inflight.wake)
}

// settle runs before a session drains its in-flight records on
// stop or failure: a running commit is waited for, so that the queued
// records are produced (or dropped by an abort).
func (e *eosState) settle(ctx context.Context) {
	if err := e.waitCommit(ctx); err != nil {
		e.log.Warn("the last kafka transaction did not commit; the next start sends it again", "err", err)
	}
}

// finish ends the open transaction when the session stops, after the
// drain: it commits it if it holds only whole Postgres transactions and
// nothing failed, otherwise aborts it.
func (e *eosState) finish(ctx context.Context) {
	if e.fenced.Load() {
		return
	}
	e.settle(ctx)
	if !e.open && !e.begun {
		return
	}
	if e.unitRecords > 0 || e.covered.EndLSN == 0 || e.fails.failureErr() != nil || e.abortReq.Load() != nil {
		cause := errors.New("the session ended inside a postgres transaction")
		if err := e.fails.failureErr(); err != nil {
			cause = err
		} else if p := e.abortReq.Load(); p != nil {
			cause = *p
		}
		_ = e.abort(ctx, cause)
		return
	}
	e.startCommit(ctx)
	e.settle(ctx)
}

// refused handles a record Kafka refused inside a transaction.
// Every refusal makes the transaction uncommittable, so it is aborted; what
// then happens to the record decides whether a retry can succeed.
func (e *eosState) refused(rec *kgo.Record, m *inflightRecord, err error) bool {
	e.inflight.release(m.size)
	if errors.Is(err, kgo.ErrAborting) {
		return true // thrown away by our own abort
	}
	e.produceErrors.Inc()
	switch {
	case isFenced(err) && e.timedOut():
		e.requestAbort(e.timeoutAbort(err), e.inflight.wake)
	case isFenced(err):
		_ = e.fence(err)
	case tooLarge(err) && !recordTooLarge(rec, e.cfg.MaxBatchBytes):
		e.fails.fail(&ProduceError{Topic: rec.Topic, EventID: m.eventID, LSN: m.lsn, Err: fmt.Errorf(
			"%w; the record itself is %d bytes, so its batch was refused: the topic's max.message.bytes is below --producer-batch-max-bytes (%d), lower that flag to at most the topic's limit",
			err, recordSize(rec), e.cfg.MaxBatchBytes)})
	case recordRejected(err) && e.cfg.DeadLetterTopic != "" && !m.deadLetter:
		// Retried as is, it would be refused again, forever: the replay
		// sends it to the dead-letter topic instead (divert).
		e.addDivert(m.key, err)
		e.requestAbort(fmt.Errorf("kafka refused event %q (lsn %s) for topic %q: %w; it goes to the dead-letter topic on the retry", m.eventID, m.lsn, rec.Topic, err), e.inflight.wake)
	case recordRejected(err) || operatorError(err):
		e.fails.fail(&ProduceError{Topic: rec.Topic, EventID: m.eventID, LSN: m.lsn, Err: err})
	default:
		e.requestAbort(fmt.Errorf("produce event %q (lsn %s) to %q: %w", m.eventID, m.lsn, rec.Topic, err), e.inflight.wake)
	}
	return true
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

// divert replaces a record Kafka refused in an aborted transaction by its
// dead-letter record.
func (e *eosState) divert(rec *kgo.Record, m *inflightRecord) *kgo.Record {
	if m.deadLetter {
		return rec
	}
	err := e.divertErr(m.key)
	if err == nil {
		return rec
	}
	m.deadLetter = true
	e.log.Warn("kafka refused an outbox record; routed to the dead-letter topic",
		"event_id", m.eventID, "lsn", m.lsn.String(), "xid", m.xid, "topic", rec.Topic,
		"dead_letter_topic", e.cfg.DeadLetterTopic, "err", err)
	return router.RefusedRecord(rec, m.origin(), e.cfg.DeadLetterTopic,
		fmt.Sprintf("kafka refused the record for topic %q (%d bytes): %v", rec.Topic, len(rec.Value), err),
		tooLarge(err))
}

// endSession runs when a session ends: a running commit is finished
// (its outcome stands, whatever ended the session), and a transaction left
// open is aborted; the next session produces it again.
func (e *eosState) endSession(ctx context.Context) {
	if e.fenced.Load() {
		return // a running commit is the fenced client's: see resume
	}
	if err := e.waitCommit(ctx); err != nil && !isTxnAborted(err) {
		e.log.Warn("could not finish the kafka transaction that was committing when the session ended; whatever is not committed and confirmed is sent again by the next session (the state topic skips what is committed)", "err", err)
	}
	if e.open || e.begun {
		_ = e.abort(ctx, errors.New("the replication session ended"))
	}
}

// eosState as a deliveryMode (delivery.go).

var _ deliveryMode = (*eosState)(nil)

func (e *eosState) bind(link sessionLink, produceCtx context.Context) {
	e.link, e.produceCtx = link, produceCtx
}

func (e *eosState) run(start pglogrepl.LSN) { e.safe = start }

// sessionTracker starts from what Kafka committed: the tracker counts the
// acks of an aborted transaction's records.
func (e *eosState) sessionTracker(*checkpoint.Tracker) *checkpoint.Tracker {
	return checkpoint.New(e.safe)
}

// needsHistory: positions are committed with the server's history and
// checked against it (history.go).
func (e *eosState) needsHistory() bool { return true }

func (e *eosState) rewound(start pglogrepl.LSN) { e.safe = min(e.safe, start) }

func (e *eosState) committedThrough() pglogrepl.LSN { return e.skipEnd }

// buffersUncounted: the state record is not counted in flight.
func (e *eosState) buffersUncounted() bool { return true }

// lostSessionAborted: records of a Kafka transaction that is never
// committed stay invisible to read_committed consumers; the next session
// aborts it, or the holder's producer id load does.
func (e *eosState) lostSessionAborted() bool { return true }

func (e *eosState) unfence(clearFailure func()) (string, bool) {
	clearFailure()
	e.fenced.Store(false)
	return e.txnID, true
}

func (e *eosState) acked(key replayKey) { e.sent.acked(key, true) }

func (e *eosState) mayConfirm(tracked pglogrepl.LSN) (pglogrepl.LSN, bool) {
	if e.fenced.Load() {
		return 0, false
	}
	return e.confirmable(tracked), true
}

func (e *eosState) fencedOff() bool { return e.fenced.Load() }

// resumeFrom: a new session starts from what Kafka committed.
func (e *eosState) resumeFrom(pglogrepl.LSN) pglogrepl.LSN { return e.safe }

func (e *eosState) idle() bool {
	return !e.open && e.committing == nil && len(e.queue) == 0
}

// flushUnits commits the open Kafka transaction now, between Postgres
// transactions, and holds the loop until it did (unstreamDrain).
func (e *eosState) flushUnits(ctx context.Context, tracked pglogrepl.LSN) (bool, error) {
	switch {
	case e.committing != nil:
		return true, e.waitCommit(ctx)
	case e.open:
		// Between Postgres transactions: due now, tick commits it.
		e.full = true
		return true, e.tick(ctx)
	}
	// Nothing open: what the tracker acknowledged is committed.
	e.confirmable(tracked)
	return false, nil
}
