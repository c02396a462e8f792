package bench

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
)

// Relay is one relay under test.
type Relay interface {
	// Name is how the tables call it.
	Name() string
	// Topics are the topics it produces to, created before it starts.
	Topics() []string
	// Start connects and starts relaying in the background.
	Start(ctx context.Context) error
	// Done counts the events that are safely delivered: acknowledged by
	// Kafka and, where the relay keeps a position, no longer to be resent
	// (for the poll relay: marked sent and committed).
	Done() int64
	// Err reports a failure the relay stopped on, nil while it runs.
	Err() error
	// Stop stops it and releases its connections.
	Stop() error
}

// slotRelay is a relay that reads a replication slot; a drain is complete
// only once the slot is confirmed past the last commit.
type slotRelay interface {
	Relay
	Slot() string
	// ConfirmsSlot reports whether the relay confirms its position to the
	// server, so a drain can wait for it.
	ConfirmsSlot() bool
}

// statusInterval is how often the slot-based relays report their position.
// walbox's default is 1s; a shorter one gives the drain times a finer
// resolution and costs one small message per interval.
const statusInterval = 250 * time.Millisecond

// walboxRelay is walbox's pipeline run in this process, as cmd/walbox wires
// it (same Kafka client, router and relay settings, defaults except the
// status interval and the topic template). It runs only when a CPU profile
// is asked for (--cpuprofile), next to the walbox process that the figures
// come from: its memory cannot be told apart from the benchmark's.
type walboxRelay struct {
	env    *Env
	slot   string
	prefix string
	linger time.Duration
	log    *slog.Logger

	kcl      *kgo.Client
	cancel   context.CancelFunc
	done     chan error
	acked    atomic.Int64
	produced atomic.Int64
	failed   atomic.Pointer[error]

	// In-flight samples, taken every inflightSample while it runs.
	sampleStop chan struct{}
	sampleDone chan struct{}
	samples    []int64
}

var _ slotRelay = (*walboxRelay)(nil)

// inflightSample is how often walboxRelay samples its in-flight records.
const inflightSample = 20 * time.Millisecond

// InflightStats summarises how full walbox's in-flight window was: a window
// that is full most of the time means Kafka's acknowledgements, not
// Postgres or walbox's own CPU, limit the throughput.
type InflightStats struct {
	Limit      int     `json:"limit"`
	Mean       float64 `json:"mean"`
	AtLimitPct float64 `json:"at_limit_pct"` // samples with at least 95% of the limit in flight
	Samples    int     `json:"samples"`
}

// inflightStats returns the samples' summary.
func (w *walboxRelay) inflightStats() *InflightStats {
	limit := int64(walboxMaxInflight)
	s := &InflightStats{Limit: walboxMaxInflight, Samples: len(w.samples)}
	if len(w.samples) == 0 {
		return s
	}
	var sum int64
	full := 0
	for _, v := range w.samples {
		sum += v
		if v*100 >= limit*95 {
			full++
		}
	}
	s.Mean = float64(sum) / float64(len(w.samples))
	s.AtLimitPct = 100 * float64(full) / float64(len(w.samples))
	return s
}

// NewWalbox returns walbox streaming slot into topics prefix.<aggregate_type>
// with the given producer linger.
func (e *Env) NewWalbox(slot, prefix string, linger time.Duration, log *slog.Logger) Relay {
	return &walboxRelay{env: e, slot: slot, prefix: prefix, linger: linger, log: log}
}

// walboxInProcessName is the relay name of the in-process walbox, run
// only for a CPU profile (--cpuprofile); its memory is not walbox's alone.
const walboxInProcessName = "walbox (in-process)"

func (w *walboxRelay) Name() string       { return walboxInProcessName }
func (w *walboxRelay) Slot() string       { return w.slot }
func (w *walboxRelay) ConfirmsSlot() bool { return true }
func (w *walboxRelay) Done() int64        { return w.acked.Load() }
func (w *walboxRelay) Topics() []string {
	return []string{w.prefix + ".order", w.prefix + ".customer"}
}

func (w *walboxRelay) Err() error {
	if p := w.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// Defaults of cmd/walbox (config package) that the relay's own defaults do
// not already give.
var (
	walboxMaxInflight      = config.Defaults().MaxInflightRecords
	walboxMaxInflightBytes = config.Defaults().MaxInflightBytes
	walboxBatchMaxSize     = config.Defaults().ProducerBatchMaxBytes
)

const walboxDedupWindow = 100000

func (w *walboxRelay) Start(ctx context.Context) error {
	rt, err := router.New(router.Config{TopicTemplate: w.prefix + ".{aggregate_type}"})
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{
		Brokers:            w.env.Brokers,
		ClientID:           "walbox",
		Linger:             w.linger,
		BatchMaxBytes:      walboxBatchMaxSize,
		MaxBufferedRecords: walboxMaxInflight + 1,
	}, w.log, reg)
	if err != nil {
		return err
	}
	w.kcl = kcl
	relay, err := pipeline.New(pipeline.Config{
		ConnString:         w.env.DSN(),
		Slot:               w.slot,
		Publication:        Publication,
		StatusInterval:     statusInterval,
		DedupWindow:        walboxDedupWindow,
		MaxInflightRecords: walboxMaxInflight,
		MaxInflightBytes:   walboxMaxInflightBytes,
		MaxBatchBytes:      walboxBatchMaxSize,
	}, &countingProducer{Client: kcl, acked: &w.acked, produced: &w.produced}, rt, reg, w.log)
	if err != nil {
		kcl.Close()
		return err
	}
	start, err := w.env.CreateSlot(ctx, w.slot) // exists already for a backlog
	if err != nil {
		kcl.Close()
		return err
	}
	w.sampleStop, w.sampleDone = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(w.sampleDone)
		t := time.NewTicker(inflightSample)
		defer t.Stop()
		for {
			select {
			case <-w.sampleStop:
				return
			case <-t.C:
				w.samples = append(w.samples, w.produced.Load()-w.acked.Load())
			}
		}
	}()
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.done = make(chan error, 1)
	go func() {
		err := relay.Run(rctx, start)
		if err != nil { // Run returns nil after a clean stop
			w.failed.Store(&err)
		}
		w.done <- err
	}()
	return nil
}

func (w *walboxRelay) Stop() error {
	if w.cancel == nil {
		return nil
	}
	close(w.sampleStop)
	<-w.sampleDone
	w.cancel()
	err := <-w.done
	w.kcl.Close()
	w.cancel = nil
	return err
}

// countingProducer counts the records Kafka acknowledged. It wraps each
// promise, which costs walbox one closure per record in this benchmark.
type countingProducer struct {
	*kgo.Client
	acked, produced *atomic.Int64
}

func (p *countingProducer) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.produced.Add(1)
	p.Client.Produce(ctx, r, func(r *kgo.Record, err error) {
		if err == nil {
			p.acked.Add(1)
		}
		promise(r, err)
	})
}

// noRelay is the baseline: nothing reads the outbox.
type noRelay struct{}

func (noRelay) Name() string                { return "none (writer only)" }
func (noRelay) Topics() []string            { return nil }
func (noRelay) Start(context.Context) error { return nil }
func (noRelay) Done() int64                 { return 0 }
func (noRelay) Err() error                  { return nil }
func (noRelay) Stop() error                 { return nil }

// slotConfirmed returns the slot's confirmed_flush_lsn.
func slotConfirmed(ctx context.Context, conn *pgx.Conn, slot string) (pglogrepl.LSN, error) {
	var lsn pglogrepl.LSN
	err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn)
	if err != nil {
		return 0, fmt.Errorf("read slot %s: %w", slot, err)
	}
	return lsn, nil
}
