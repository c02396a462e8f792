package tracing

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// Reasons of walbox_tracing_spans_dropped_total.
const (
	DropQueueFull    = "queue_full"    // the export queue was full
	DropExportFailed = "export_failed" // the exporter returned an error or timed out
)

// queue is a span processor that never blocks the goroutine ending a span:
// a finished span goes into a bounded channel, or is dropped and counted.
// One worker exports batches. The SDK's BatchSpanProcessor also drops when
// full, but counts its drops only for its own debug log; walbox needs them
// in a metric and in an operator's log.
type queue struct {
	exp   sdktrace.SpanExporter
	cfg   Config
	log   *slog.Logger
	spans chan sdktrace.ReadOnlySpan

	dropped  *prometheus.CounterVec
	exported prometheus.Counter
	full     prometheus.Counter // dropped{reason=queue_full}, resolved once
	failed   prometheus.Counter

	// Drops not yet logged, and a wake-up for the worker to log them.
	unlogged atomic.Int64
	lastErr  atomic.Pointer[string]
	dropNote chan struct{}
	logEvery time.Duration

	flushReq chan chan struct{}
	stop     chan struct{}
	done     chan struct{} // the worker stopped
	logged   chan struct{} // the drop logger stopped
	once     sync.Once
}

var _ sdktrace.SpanProcessor = (*queue)(nil)

func newQueue(exp sdktrace.SpanExporter, cfg Config, log *slog.Logger, reg prometheus.Registerer) *queue {
	q := &queue{
		exp:      exp,
		cfg:      cfg,
		log:      log,
		spans:    make(chan sdktrace.ReadOnlySpan, cfg.QueueSize),
		dropNote: make(chan struct{}, 1),
		logEvery: DropLogInterval,
		flushReq: make(chan chan struct{}),
		stop:     make(chan struct{}),
		done:     make(chan struct{}),
		logged:   make(chan struct{}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "walbox_tracing_spans_dropped_total",
			Help: "Producer spans dropped instead of exported, by reason: queue_full (the export queue was full) or export_failed (the collector refused, failed or timed out). Delivery is not affected.",
		}, []string{"reason"}),
		exported: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "walbox_tracing_spans_exported_total",
			Help: "Producer spans the collector accepted.",
		}),
	}
	q.full = q.dropped.WithLabelValues(DropQueueFull)
	q.failed = q.dropped.WithLabelValues(DropExportFailed)
	if reg != nil {
		reg.MustRegister(q.dropped, q.exported)
	}
	return q
}

func (q *queue) start() {
	go q.run()
	go q.logDrops()
}

// logDrops logs dropped spans at most once per logEvery, and what is left
// once the worker stopped. It is apart from the worker, which a hung
// collector holds for up to ExportTimeout.
func (q *queue) logDrops() {
	defer close(q.logged)
	ticker := time.NewTicker(q.logEvery)
	defer ticker.Stop()
	var last time.Time
	log := func(force bool) {
		n := q.unlogged.Load()
		if n == 0 || (!force && time.Since(last) < q.logEvery) {
			return
		}
		q.unlogged.Add(-n)
		last = time.Now()
		args := []any{"spans", n, "metric", "walbox_tracing_spans_dropped_total", "queue_size", q.cfg.QueueSize}
		if e := q.lastErr.Load(); e != nil {
			args = append(args, "err", *e)
		}
		q.log.Warn("dropped producer spans: the collector is down, slow or refusing, or the export queue is too small (OTEL_BSP_MAX_QUEUE_SIZE); delivery is not affected", args...)
	}
	for {
		select {
		case <-q.dropNote:
			log(false)
		case <-ticker.C:
			log(false)
		case <-q.done:
			log(true)
			return
		}
	}
}

func (q *queue) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd queues s, or drops it when the queue is full: it never blocks.
func (q *queue) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	select {
	case q.spans <- s:
	default:
		q.full.Inc()
		q.noteDrop(1, "")
	}
}

func (q *queue) noteDrop(n int, reason string) {
	if reason != "" {
		q.lastErr.Store(&reason)
	}
	q.unlogged.Add(int64(n))
	select {
	case q.dropNote <- struct{}{}:
	default:
	}
}

// run is the worker: it batches, exports and logs drops at most once per
// logEvery.
func (q *queue) run() {
	defer close(q.done)
	batch := make([]sdktrace.ReadOnlySpan, 0, q.cfg.BatchSize)
	timer := time.NewTimer(q.cfg.BatchDelay)
	defer timer.Stop()
	export := func() {
		if len(batch) == 0 {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), q.cfg.ExportTimeout)
		err := q.exp.ExportSpans(ctx, batch)
		cancel()
		if err != nil {
			q.failed.Add(float64(len(batch)))
			q.noteDrop(len(batch), err.Error())
		} else {
			q.exported.Add(float64(len(batch)))
		}
		clear(batch)
		batch = batch[:0]
	}
	drain := func() {
		for {
			select {
			case s := <-q.spans:
				batch = append(batch, s)
				if len(batch) == cap(batch) {
					export()
				}
			default:
				export()
				return
			}
		}
	}
	for {
		select {
		case s := <-q.spans:
			batch = append(batch, s)
			if len(batch) == cap(batch) {
				export()
			}
		case <-timer.C:
			export()
			timer.Reset(q.cfg.BatchDelay)
		case ack := <-q.flushReq:
			drain()
			close(ack)
		case <-q.stop:
			drain()
			return
		}
	}
}

// ForceFlush exports what is queued, waiting at most until ctx ends.
func (q *queue) ForceFlush(ctx context.Context) error {
	ack := make(chan struct{})
	select {
	case q.flushReq <- ack:
	case <-q.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-ack:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Shutdown exports what is queued and shuts the exporter down, waiting at
// most until ctx ends.
func (q *queue) Shutdown(ctx context.Context) error {
	q.once.Do(func() { close(q.stop) })
	for _, c := range []chan struct{}{q.done, q.logged} {
		select {
		case <-c:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return q.exp.Shutdown(ctx)
}
