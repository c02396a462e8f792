package pipeline

import (
	"context"
	"errors"
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

// Config holds the relay's settings. Zero durations and sizes take the
// defaults noted on each field.
type Config struct {
	// ConnString is a libpq URL or key=value DSN; the relay adds
	// replication=database itself.
	ConnString  string
	Slot        string
	Publication string
	// StatusInterval is how often a standby status update is sent (1s).
	StatusInterval time.Duration
	// ReceiveTimeout is how long the replication connection may stay
	// silent (30s). At half of it the status update asks the server for a
	// reply; past it the connection is given up as dead, which is how a
	// connection stalled without being closed (a partition, a hung proxy)
	// is noticed: the server only pings a client that stops replying, and
	// writes into a dead socket succeed for a long time.
	ReceiveTimeout time.Duration
	// ShutdownTimeout bounds the wait for in-flight acks on stop (30s).
	ShutdownTimeout time.Duration
	// DedupWindow is how many acknowledged event ids are remembered to skip
	// what Postgres re-sends after a reconnect; 0 disables it.
	DedupWindow int
	// MaxInflightRecords and MaxInflightBytes bound unacknowledged records
	// (10000, 64 MiB).
	MaxInflightRecords int
	MaxInflightBytes   int64
	// BackoffMin and BackoffMax bound the reconnect delay (500ms, 30s).
	BackoffMin, BackoffMax time.Duration
	// DeadLetterTopic, when set, receives records Kafka refuses for what
	// they are (too large, invalid); empty means such a refusal stops the
	// relay. It should match the router's dead-letter policy.
	DeadLetterTopic string
	// MaxBatchBytes is the producer's batch limit (ProducerBatchMaxBytes).
	// A record refused as too large that is itself near this size is the
	// culprit and may be dead-lettered; a smaller one was refused with its
	// batch, because a topic's max.message.bytes is below the limit, and
	// that stops the relay with advice instead. 0 means franz-go's default.
	MaxBatchBytes int
	// MessagePrefix, when set, makes walbox also route transactional
	// logical decoding messages with this prefix (pg_logical_emit_message)
	// as outbox events; see message.go.
	MessagePrefix string
	// SlotBusyTimeout is how long a slot held by another process (SQLSTATE
	// 55006) is waited for before giving up (2m): long enough for a killed
	// predecessor's walsender to notice (wal_sender_timeout, 60s by
	// default), short enough to report a second walbox on the same slot.
	SlotBusyTimeout time.Duration
}

func (c *Config) setDefaults() {
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
	if c.ReceiveTimeout <= 0 {
		c.ReceiveTimeout = 30 * time.Second
	}
	if c.ShutdownTimeout <= 0 {
		c.ShutdownTimeout = 30 * time.Second
	}
	if c.MaxInflightRecords <= 0 {
		c.MaxInflightRecords = 10000
	}
	if c.MaxInflightBytes <= 0 {
		c.MaxInflightBytes = 64 << 20
	}
	if c.MaxBatchBytes <= 0 {
		c.MaxBatchBytes = 1000012 // franz-go's default
	}
	if c.SlotBusyTimeout <= 0 {
		c.SlotBusyTimeout = 2 * time.Minute
	}
	if c.BackoffMin <= 0 {
		c.BackoffMin = 500 * time.Millisecond
	}
	if c.BackoffMax < c.BackoffMin {
		c.BackoffMax = max(30*time.Second, c.BackoffMin)
	}
}

// Validate reports settings the relay cannot run with.
func (c Config) Validate() error {
	var errs []error
	if c.ConnString == "" {
		errs = append(errs, errors.New("pipeline: connection string is empty"))
	}
	if c.Slot == "" {
		errs = append(errs, errors.New("pipeline: slot name is empty"))
	}
	if c.Publication == "" {
		errs = append(errs, errors.New("pipeline: publication name is empty"))
	}
	if c.DedupWindow < 0 {
		errs = append(errs, fmt.Errorf("pipeline: dedup window %d is negative", c.DedupWindow))
	}
	return errors.Join(errs...)
}

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
	// received is the end of the WAL received so far, over all sessions;
	// written by the loop when a session ends.
	received pglogrepl.LSN

	// Owned by the loop goroutine.
	tracker *checkpoint.Tracker
	dec     *decoder.Decoder

	failOnce sync.Once
	failure  atomic.Pointer[error]
	failed   chan struct{}

	streaming atomic.Bool
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
		failed:   make(chan struct{}),
	}
	r.metrics = newMetrics(reg, r.inflight)
	r.dedup = newDedupWindow(cfg.DedupWindow)
	return r, nil
}

// Streaming reports whether a replication session is currently streaming;
// it backs the /healthz endpoint. Safe for concurrent use.
func (r *Relay) Streaming() bool { return r.streaming.Load() }

// fail records the first permanent failure and wakes the loop. Safe for
// concurrent use (called from promise callbacks).
func (r *Relay) fail(err error) {
	r.failOnce.Do(func() {
		r.failure.Store(&err)
		close(r.failed)
	})
}

func (r *Relay) failureErr() error {
	if p := r.failure.Load(); p != nil {
		return *p
	}
	return nil
}

// Run streams from start, normally the slot's confirmed_flush_lsn, until ctx
// is cancelled (it then drains in-flight acks, confirms what they cover and
// returns nil) or a permanent error occurs. Retryable failures of the
// Postgres connection are retried with capped exponential backoff.
func (r *Relay) Run(ctx context.Context, start pglogrepl.LSN) error {
	r.tracker = checkpoint.New(start)
	r.metrics.confirmedLSN.Set(float64(start))
	attempt := 0
	var busySince time.Time
	for {
		streamed, err := r.session(ctx)
		r.streaming.Store(false)
		r.metrics.streaming.Set(0)
		if err == nil {
			return nil
		}
		if ferr := r.failureErr(); ferr != nil {
			return ferr
		}
		if !IsRetryable(err) {
			return err
		}
		if streamed {
			attempt = 0
		}
		if isSlotBusy(err) {
			if busySince.IsZero() {
				busySince = time.Now()
			} else if time.Since(busySince) > r.cfg.SlotBusyTimeout {
				return fmt.Errorf("%w: slot %q has been in use by another process for %s; is another walbox running on it? Stop it, or give this one its own --slot (and publication)",
					err, r.cfg.Slot, r.cfg.SlotBusyTimeout)
			}
		} else {
			busySince = time.Time{}
		}
		r.metrics.reconnects.Inc()
		// Let everything in flight settle before replaying: records Kafka
		// acks now enter the dedup window, and the replay starts past every
		// transaction they complete.
		if err := r.producer.Flush(ctx); err != nil && ctx.Err() == nil {
			return fmt.Errorf("flush before reconnect: %w", err)
		}
		// Refused records not yet dead-lettered belong to transactions the
		// replay sends again; they are produced again from there.
		r.dedup.prepareReplay(r.reroute.take())
		if ferr := r.failureErr(); ferr != nil {
			return ferr
		}
		delay := Backoff(attempt, r.cfg.BackoffMin, r.cfg.BackoffMax)
		attempt++
		r.log.Warn("replication session ended, reconnecting",
			"err", err, "slot", r.cfg.Slot, "attempt", attempt, "retry_in", delay.String(),
			"confirmed_lsn", r.tracker.Confirmed().String())
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil
		}
	}
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
