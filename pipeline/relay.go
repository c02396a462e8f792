package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/router"
)

// Producer is the part of *kgo.Client the relay uses.
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
}

var _ Producer = (*kgo.Client)(nil)

// Router maps an outbox row to a record; *router.Router is the implementation.
type Router interface {
	Route(ins *decoder.Insert) (router.Routed, error)
}

var _ Router = (*router.Router)(nil)

// Relay moves outbox rows from a replication slot to Kafka. Create it with
// New; Run may be called once.
type Relay struct {
	cfg      Config
	log      *slog.Logger
	producer Producer
	router   Router
	metrics  *metrics
	inflight *inflight
	dedup    *dedupWindow
	reroute  rerouteQueue
	messages messageRelations
	// lastCommit is the highest commit LSN received so far, over all
	// sessions; written by the loop when a session ends.
	lastCommit pglogrepl.LSN
	// tables holds Config.Tables as "schema.table"; nil routes every table.
	tables  map[string]struct{}
	foreign foreignLog
	limits  topicLimitCache
	// failover is the failover part: server identity, histories, the
	// ledger of what was sent, resume decisions (failover.go).
	failover failover
	// timeoutLogged is set once the effective receive timeout was logged.
	timeoutLogged bool

	// Owned by the loop goroutine.
	tracker *checkpoint.Tracker
	dec     *decoder.Decoder

	// fails holds the first permanent failure. Only standByAfterFence
	// clears it, between sessions.
	fails failState

	streaming atomic.Bool
	// standby is set while the slot is held by another process and
	// Config.Standby waits for it.
	standby atomic.Bool
	// confirmed is the position last sent to the server in a status update.
	confirmed atomic.Uint64

	// delivery is the delivery mode: atLeastOnce (delivery.go) or the
	// exactly-once eosState (eos_txn.go).
	delivery deliveryMode

	// slotGap reports a slot someone else moved ahead (slotgap.go).
	slotGap *slotGap

	// spool keeps streamed transactions until they commit (stream.go).
	spool         *spool
	streamMetrics *streamMetrics
	// unstreamXID is a streamed transaction the stream could not tell
	// apart (errStreamAmbiguous): the next session speaks protocol
	// version 1, so the server sends it whole at its commit (stream.go).
	unstreamXID uint32
}

// New builds a relay. Metrics go to reg; log must not be nil.
func New(cfg Config, producer Producer, rt Router, reg prometheus.Registerer, log *slog.Logger) (*Relay, error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	r := &Relay{
		cfg:      cfg,
		log:      log,
		producer: producer,
		router:   rt,
		inflight: newInflight(cfg.MaxInflightRecords, cfg.MaxInflightBytes),
		dec:      decoder.New(),
	}
	r.fails.failed = make(chan struct{})
	r.metrics = newMetrics(reg, r.inflight)
	r.streamMetrics = newStreamMetrics(reg)
	r.slotGap = newSlotGap(reg)
	r.spool = newSpool(cfg.SpoolDir, cfg.SpoolMaxBytes, r.streamMetrics.spoolBytes)
	r.dedup = newDedupWindow(cfg.DedupWindow)
	r.failover = failover{cfg: &r.cfg, log: log, erased: r.metrics.failoverErased}
	r.delivery = &atLeastOnce{sent: &r.failover.sent}
	if cfg.Delivery == DeliveryExactlyOnce {
		txp, ok := producer.(TxnProducer)
		if !ok {
			return nil, fmt.Errorf("pipeline: delivery %s needs a transactional producer (a *kgo.Client with a transactional id), got %T", DeliveryExactlyOnce, producer)
		}
		if cfg.State == nil {
			return nil, fmt.Errorf("pipeline: delivery %s needs Config.State (a KafkaState on %q)", DeliveryExactlyOnce, cfg.StateTopic)
		}
		r.delivery = newEOSState(&r.cfg, txp, reg, log, &r.fails, r.inflight, &r.failover.sent, r.metrics.produceErrors)
		// The dedup window remembers acknowledged records, but in a
		// transaction an acknowledged record is not committed: the state
		// topic decides what is skipped instead.
		r.dedup = nil
	}
	r.tables = cfg.tableSet()
	return r, nil
}

// Streaming reports whether a replication session is currently streaming;
// it backs the /readyz endpoint. Safe for concurrent use.
func (r *Relay) Streaming() bool { return r.streaming.Load() }

// Confirmed returns the position last confirmed to the server in a status
// update (0 before the first; after a history switch, at most where the new
// session starts, until its first); the server may not have received it yet.
// It feeds the trailing slot's history (package retention). Safe for
// concurrent use.
func (r *Relay) Confirmed() pglogrepl.LSN { return pglogrepl.LSN(r.confirmed.Load()) }

// failState is the first permanent failure of a relay; failed is closed
// when it is set. The relay and each session's loop share it.
type failState struct {
	mu      sync.Mutex
	failure atomic.Pointer[error]
	failed  chan struct{}
}

// fail records the first permanent failure and wakes the loop. Safe for
// concurrent use (called from promise callbacks).
func (f *failState) fail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failure.Load() == nil {
		f.failure.Store(&err)
		close(f.failed)
	}
}

func (f *failState) failureErr() error {
	if p := f.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// clear forgets the failure (standByAfterFence, between sessions).
func (f *failState) clear() {
	f.mu.Lock()
	f.failure.Store(nil)
	f.failed = make(chan struct{})
	f.mu.Unlock()
}

// fail records the first permanent failure (failState.fail).
func (r *Relay) fail(err error) { r.fails.fail(err) }

func (r *Relay) failureErr() error { return r.fails.failureErr() }

// Run streams from start, normally the slot's confirmed_flush_lsn, until ctx
// is cancelled (it then drains in-flight acks, confirms what they cover and
// returns nil) or a permanent error occurs. Retryable failures of the
// Postgres connection are retried with capped exponential backoff.
func (r *Relay) Run(ctx context.Context, start pglogrepl.LSN) error {
	r.spool.cleanup()
	defer r.spool.close()
	defer r.limits.wait() // a topic limit's background lookup (limits.go)
	r.tracker = checkpoint.New(start)
	r.delivery.run(start)
	r.metrics.confirmedLSN.Set(float64(start))
	retry := reconnectSchedule{lo: r.cfg.BackoffMin, hi: r.cfg.BackoffMax}
	var repeats repeatedWarning
	var busySince time.Time
	for {
		began := time.Now()
		streamed, err := r.session(ctx)
		r.streaming.Store(false)
		r.metrics.streaming.Set(0)
		if err == nil {
			return nil
		}
		fenced := false
		if ferr := r.failureErr(); ferr != nil {
			if !r.standByAfterFence(ferr) {
				return ferr
			}
			err, fenced = ferr, true
		}
		if !streamed && ctx.Err() != nil {
			// Stopped while connecting or starting replication: nothing
			// was received, so nothing is in flight or to confirm; the
			// error is only the interrupted call's.
			return nil
		}
		if !fenced && !IsRetryable(err) && !isTxnAborted(err) {
			return explainSlotWALGone(err, r.cfg.Slot)
		}
		if streamed {
			retry.sessionLost(began, time.Now())
		}
		standby := fenced
		if fenced {
			r.enterStandby(err)
		} else if isSlotBusy(err) {
			if r.cfg.Standby {
				standby = true
				r.enterStandby(err)
			} else if busySince.IsZero() {
				busySince = time.Now()
			} else if time.Since(busySince) > r.cfg.SlotBusyTimeout {
				return fmt.Errorf("%w: slot %q has been in use by another process for %s; is another walbox running on it? Stop it, give this one its own --slot (and publication), or run both with --standby so one waits for the other",
					err, r.cfg.Slot, r.cfg.SlotBusyTimeout)
			}
		} else {
			busySince = time.Time{}
		}
		if !standby {
			r.metrics.reconnects.Inc()
		}
		// Let everything in flight settle before replaying: records Kafka
		// acks now enter the dedup window, and the replay starts past every
		// transaction they complete. What Kafka does not ack in time is
		// purged (flushLostSession).
		purged, perr := r.flushLostSession(ctx)
		if perr != nil {
			return perr
		}
		// Refused records not yet dead-lettered belong to transactions the
		// replay sends again; they are produced again from there.
		r.dedup.prepareReplay(r.reroute.take())
		if purged {
			// The purged records are unacknowledged but remembered in
			// the window (it assumes a flush settles everything): forget
			// every unconfirmed transaction, which the replay sends again
			// whole (a few acknowledged records twice, at least once).
			r.dedup.forgetFrom(r.tracker.Confirmed())
		}
		if ferr := r.failureErr(); ferr != nil {
			if !r.standByAfterFence(ferr) {
				return ferr
			}
			standby = true
			r.enterStandby(ferr)
		}
		delay := r.cfg.StandbyRetry
		if !standby {
			var fast bool
			now := time.Now()
			delay, fast = retry.next(now, err)
			level, skipped := repeats.level(now, fmt.Sprint(err), fast)
			r.log.Log(ctx, level, "replication session ended, reconnecting",
				"err", err, "slot", r.cfg.Slot, "attempt", retry.tries, "retry_in", delay.String(), "fast_retry", fast,
				"confirmed_lsn", r.tracker.Confirmed().String(), "same_failures_logged_at_debug", skipped)
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
}

// bufferAborter is the part of *kgo.Client that purges buffered records.
type bufferAborter interface {
	AbortBufferedRecords(ctx context.Context) error
}

var _ bufferAborter = (*kgo.Client)(nil)

// flushLostSession waits, at most LostSessionFlushTimeout, for Kafka to
// acknowledge the records of the session that just ended, then purges the
// rest. franz-go retries a record without limit (no delivery timeout, so a
// live session survives any Kafka outage); but once the session is gone
// the slot may have a new holder (a standby, after wal_sender_timeout)
// that sends the same transactions again and newer ones after them. An old
// record delivered after those would put an old state of its key last in
// the partition: compacted topics, KTables and upserting consumers would
// regress. Purged records are never lost: nothing past the first of them
// was confirmed, so whoever streams the slot next sends them again.
func (r *Relay) flushLostSession(ctx context.Context) (purged bool, err error) {
	ab, ok := r.producer.(bufferAborter)
	if !ok {
		// A producer that cannot purge is waited for, as long as it takes.
		if err := r.producer.Flush(ctx); err != nil && ctx.Err() == nil {
			return false, fmt.Errorf("flush before reconnect: %w", err)
		}
		return false, nil
	}
	if !r.delivery.buffersUncounted() && r.inflight.records.Load() == 0 {
		// Nothing to wait for (a standby's retry, say): no Flush, which
		// logs a line each time. (In exactly-once mode the state record
		// is not counted in flight, and a transactional client logs its
		// flushes at debug level.)
		return false, nil
	}
	fctx, cancel := context.WithTimeout(ctx, r.cfg.LostSessionFlushTimeout)
	err = r.producer.Flush(fctx)
	cancel()
	if err == nil || ctx.Err() != nil {
		return false, nil
	}
	pending := r.inflight.records.Load()
	// AbortBufferedRecords waits for the produce requests already sent to
	// be answered or to time out (their records may still land; nothing
	// newer does); a client stuck even then is left to the process exit,
	// which closes it and fails what it holds.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.ShutdownTimeout)
	defer cancel()
	if err := ab.AbortBufferedRecords(actx); err != nil {
		if r.delivery.lostSessionAborted() {
			// Records of a Kafka transaction that is never committed
			// stay invisible to read_committed consumers; the next
			// session aborts it, or the holder's producer id load does.
			r.log.Warn("could not purge the records of the lost session; they belong to a kafka transaction that is aborted instead",
				"slot", r.cfg.Slot, "records", pending, "err", err)
			return true, nil
		}
		return true, fmt.Errorf("purge the %d records Kafka did not acknowledge within %s of the end of the replication session: %w; walbox stops so that its Kafka client is closed and cannot deliver them later (the slot's next holder sends them again)",
			pending, r.cfg.LostSessionFlushTimeout, err)
	}
	r.log.Warn("purged the records Kafka did not acknowledge within the bound after the replication session ended; the slot's next holder sends them again from the confirmed position",
		"slot", r.cfg.Slot, "records", pending, "bound", r.cfg.LostSessionFlushTimeout.String(),
		"confirmed_lsn", r.tracker.Confirmed().String())
	return true, nil
}

// Backoff returns the delay before retry number attempt (from 0): capped
// exponential between lo and hi, with jitter so a fleet of restarted relays
// does not reconnect in lockstep.
func Backoff(attempt int, lo, hi time.Duration) time.Duration {
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	d = min(d, hi)
	return d/2 + rand.N(d/2+1)
}

// repeatWarnInterval is how often a fast retry failing as the one before
// is logged as a warning; the attempts between are logged at debug level.
// Against a server that answers "read-only" for NotPrimaryRetryWindow,
// that is 20 warnings instead of about 1,600.
const repeatWarnInterval = 30 * time.Second

// repeatedWarning decides the level of each reconnect's log line.
type repeatedWarning struct {
	msg     string
	at      time.Time
	skipped int
}

// level returns the level of the line for a retry failing with msg at now,
// and how many lines of the same failure were logged at debug level since
// the last warning (reported with the warning).
func (w *repeatedWarning) level(now time.Time, msg string, fast bool) (slog.Level, int) {
	if fast && msg == w.msg && now.Sub(w.at) < repeatWarnInterval {
		w.skipped++
		return slog.LevelDebug, w.skipped
	}
	skipped := w.skipped
	w.msg, w.at, w.skipped = msg, now, 0
	return slog.LevelWarn, skipped
}
