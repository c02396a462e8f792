package tracing

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/walbox/walbox/internal/version"
	"github.com/walbox/walbox/router"
)

// ScopeName is the instrumentation scope of walbox's spans.
const ScopeName = "github.com/walbox/walbox/tracing"

// Attribute keys beyond the messaging conventions' own.
const (
	AttrCommitLSN  = "walbox.commit_lsn"  // the transaction's commit LSN, as 16/B374D848
	AttrCommitTime = "walbox.commit_time" // the commit's timestamp, RFC 3339 with nanoseconds
	// AttrWaitBeforeProduce is how long, in seconds, the event waited
	// between walbox reading its transaction (the span's start) and its
	// hand-over to the Kafka client: the in-flight limit, a Kafka outage
	// or an exactly-once commit holds it there. What follows, up to the
	// span's end, is Kafka's part; the "produce" event marks the boundary.
	AttrWaitBeforeProduce = "walbox.wait_before_produce_seconds"
	// AttrCommitToRead is how long, in seconds, from the commit to walbox
	// reading the transaction: replication lag, a bulk job ahead in the
	// WAL, walbox down.
	AttrCommitToRead = "walbox.commit_to_read_seconds"
	AttrReplayed     = "walbox.replayed"    // true for events of walbox replay or the snapshot takeover
	AttrDeadLetter   = "walbox.dead_letter" // true when the record goes to the dead-letter topic
)

// Event describes the outbox event a record carries.
type Event struct {
	// ReadAt is when walbox read the event's transaction (Tracer.Now at
	// its Begin); the span starts then. Zero means now.
	ReadAt     time.Time
	CommitLSN  pglogrepl.LSN
	CommitTime time.Time
	EventID    string
	// DeadLetter marks a record for the dead-letter topic: its span is an
	// error with the record's walbox_error header as the reason.
	DeadLetter bool
	// Replayed marks events of a replay or of the snapshot takeover.
	Replayed bool
}

// Tracer creates the producer spans. Safe for concurrent use; a nil
// *Tracer traces nothing.
type Tracer struct {
	cfg    Config
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	queue  *queue
	prop   propagation.TextMapPropagator
	// skipUnsampled: the sampler is parent-based and never samples under
	// an unsampled remote parent, so such a row is decided from its
	// traceparent's flags alone, without parsing or allocating.
	skipUnsampled bool
}

// NewWithExporter returns a Tracer exporting to exp through the bounded
// queue; a nil sampler is parent-based always-on, a nil resource the SDK's
// default (service.name from OTEL_SERVICE_NAME, else unknown_service).
// Tests give it the SDK's in-memory exporter.
func NewWithExporter(cfg Config, exp sdktrace.SpanExporter, sampler sdktrace.Sampler, res *resource.Resource, log *slog.Logger, reg prometheus.Registerer) *Tracer {
	cfg = cfg.withDefaults()
	if sampler == nil {
		sampler = sdktrace.ParentBased(sdktrace.AlwaysSample())
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	q := newQueue(exp, cfg, log, reg)
	q.start()
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sampler), sdktrace.WithSpanProcessor(q)}
	if res != nil {
		opts = append(opts, sdktrace.WithResource(res))
	}
	tp := sdktrace.NewTracerProvider(opts...)
	return &Tracer{
		cfg:    cfg,
		tp:     tp,
		tracer: tp.Tracer(ScopeName, trace.WithInstrumentationVersion(version.Get().Version)),
		queue:  q,
		prop:   propagation.TraceContext{},
		// The SDK's ParentBased describes its samplers; its default for
		// an unsampled remote parent is AlwaysOffSampler.
		skipUnsampled: strings.Contains(sampler.Description(), "remoteParentNotSampled:AlwaysOffSampler"),
	}
}

// Shutdown ends the Tracer: it exports the spans still queued, waiting at
// most until ctx ends. Spans of records still in flight are lost.
func (t *Tracer) Shutdown(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.Shutdown(ctx)
}

// ForceFlush exports the spans queued so far, waiting at most until ctx
// ends.
func (t *Tracer) ForceFlush(ctx context.Context) error {
	if t == nil {
		return nil
	}
	return t.tp.ForceFlush(ctx)
}

// Now is time.Now, or the zero time on a nil Tracer: the relay reads the
// clock per transaction only when it traces.
func (t *Tracer) Now() time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Now()
}

// Start starts the producer span of rec when its headers carry a sampled
// trace context, and returns a context holding it, to be given to End once
// Kafka answered. It returns context.Background() otherwise: no header,
// an invalid one, an unsampled trace, or a nil Tracer. With
// OutgoingProducer, rec's traceparent (and tracestate) then name the
// producer span. Start never cancels anything: the context has no deadline.
func (t *Tracer) Start(rec *kgo.Record, ev Event) context.Context {
	bg := context.Background()
	if t == nil {
		return bg
	}
	carrier, ok := t.carrier(rec)
	if !ok {
		return bg
	}
	if t.skipUnsampled && t.cfg.ContextHeader == DefaultContextHeader && unsampledFlags(headerBytes(rec.Headers, DefaultContextHeader)) {
		return bg
	}
	parent := t.prop.Extract(bg, carrier)
	psc := trace.SpanContextFromContext(parent)
	if !psc.IsValid() {
		return bg
	}
	start := ev.ReadAt
	now := time.Now()
	if start.IsZero() {
		start = now
	}
	ctx := parent
	opts := []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKindProducer), trace.WithTimestamp(start)}
	if t.cfg.Parent == ParentLink {
		if !psc.IsSampled() {
			return bg // sampling follows the writer in a linked trace too
		}
		ctx = bg
		opts = append(opts, trace.WithNewRoot(), trace.WithLinks(trace.Link{SpanContext: psc}))
	}
	// Sampled first, named and attributed after: a row that is not
	// sampled costs no attribute, name or clock formatting.
	ctx, span := t.tracer.Start(ctx, "send", opts...)
	if !span.IsRecording() {
		return bg
	}
	if t.cfg.SpanName != "" {
		span.SetName(t.cfg.SpanName)
	} else {
		span.SetName("send " + rec.Topic)
	}
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs,
		attribute.String("messaging.system", "kafka"),
		attribute.String("messaging.destination.name", rec.Topic),
		attribute.String("messaging.operation.type", "send"),
		attribute.String("messaging.operation.name", "send"),
		attribute.String(AttrCommitLSN, ev.CommitLSN.String()),
		attribute.Float64(AttrWaitBeforeProduce, now.Sub(start).Seconds()),
	)
	if ev.EventID != "" {
		attrs = append(attrs, attribute.String("messaging.message.id", ev.EventID))
	}
	if len(rec.Key) > 0 {
		attrs = append(attrs, attribute.String("messaging.kafka.message.key", string(rec.Key)))
	}
	if !ev.CommitTime.IsZero() {
		attrs = append(attrs,
			attribute.String(AttrCommitTime, ev.CommitTime.UTC().Format(time.RFC3339Nano)),
			attribute.Float64(AttrCommitToRead, start.Sub(ev.CommitTime).Seconds()))
	}
	if ev.Replayed {
		attrs = append(attrs, attribute.Bool(AttrReplayed, true))
	}
	span.SetAttributes(attrs...)
	span.AddEvent("produce", trace.WithTimestamp(now))
	if ev.DeadLetter {
		reason := headerValue(rec.Headers, router.HeaderError)
		span.SetAttributes(attribute.Bool(AttrDeadLetter, true))
		span.SetStatus(codes.Error, "dead-lettered: "+reason)
	}
	if t.cfg.Outgoing == OutgoingProducer {
		t.prop.Inject(ctx, recordCarrier{rec})
	}
	return ctx
}

// End ends the span Start put in ctx, with the record's partition and
// offset, or with err as an error status. A context without a span (what
// Start returns when it traces nothing) costs a lookup.
func (t *Tracer) End(ctx context.Context, rec *kgo.Record, err error) {
	if t == nil || ctx == nil {
		return
	}
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	partition := attribute.String("messaging.destination.partition.id", strconv.Itoa(int(rec.Partition)))
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(partition, attribute.String("error.type", errorType(err)))
	} else {
		span.SetAttributes(partition, attribute.Int64("messaging.kafka.offset", rec.Offset))
	}
	span.End()
}

// errorType is a low-cardinality name of err, for error.type.
func errorType(err error) string {
	return fmt.Sprintf("%T", err)
}

// carrier returns the carrier of rec's trace context header.
func (t *Tracer) carrier(rec *kgo.Record) (propagation.TextMapCarrier, bool) {
	for _, h := range rec.Headers {
		if h.Key != t.cfg.ContextHeader {
			continue
		}
		if t.cfg.ContextHeader == "traceparent" {
			return recordCarrier{rec}, true
		}
		// Another header: its value is a traceparent, or a Java
		// properties text with traceparent= and tracestate= lines.
		return propagation.MapCarrier(ParseContextText(h.Value)), true
	}
	return nil, false
}

func headerValue(hs []kgo.RecordHeader, key string) string {
	for _, h := range hs {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// recordCarrier reads and writes a record's headers.
type recordCarrier struct{ rec *kgo.Record }

func (c recordCarrier) Get(key string) string { return headerValue(c.rec.Headers, key) }

// Set replaces the header's value, or adds the header. The old value's
// bytes are not written to: they may be the row's.
func (c recordCarrier) Set(key, value string) {
	for i := range c.rec.Headers {
		if c.rec.Headers[i].Key == key {
			c.rec.Headers[i].Value = []byte(value)
			return
		}
	}
	c.rec.Headers = append(c.rec.Headers, kgo.RecordHeader{Key: key, Value: []byte(value)})
}

func (c recordCarrier) Keys() []string {
	keys := make([]string, len(c.rec.Headers))
	for i, h := range c.rec.Headers {
		keys[i] = h.Key
	}
	return keys
}

// ParseContextText parses a bare traceparent value, or the
// java.util.Properties text Debezium's tracing.span.context.field column
// holds ("traceparent=00-..." and "tracestate=..." lines; # and ! start
// comments, = or : separates key and value), into its keys and values.
// The values are not checked: the propagator does that.
func ParseContextText(v []byte) map[string]string {
	m := map[string]string{}
	v = bytes.TrimSpace(v)
	if !bytes.ContainsAny(v, "=:\n") {
		m["traceparent"] = string(v)
		return m
	}
	for _, line := range bytes.Split(v, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' || line[0] == '!' {
			continue
		}
		i := bytes.IndexAny(line, "=:")
		if i < 0 {
			continue
		}
		m[string(bytes.TrimSpace(line[:i]))] = unescapeProperty(bytes.TrimSpace(line[i+1:]))
	}
	return m
}

// unescapeProperty undoes java.util.Properties.store's escapes of a value
// (\=, \:, \#, \!, \\ and \ before a leading space); \uXXXX does not
// occur in a trace context.
func unescapeProperty(v []byte) string {
	if bytes.IndexByte(v, '\\') < 0 {
		return string(v)
	}
	out := make([]byte, 0, len(v))
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) {
			i++
		}
		out = append(out, v[i])
	}
	return string(out)
}

func headerBytes(hs []kgo.RecordHeader, key string) []byte {
	for _, h := range hs {
		if h.Key == key {
			return h.Value
		}
	}
	return nil
}

// unsampledFlags reports whether tp is a version-00 traceparent
// (00-<32 hex>-<16 hex>-<2 hex>) whose sampled flag is clear; anything
// else goes to the propagator, which also rejects what is invalid.
func unsampledFlags(tp []byte) bool {
	if len(tp) != 55 || tp[0] != '0' || tp[1] != '0' || tp[2] != '-' || tp[35] != '-' || tp[52] != '-' {
		return false
	}
	f := tp[54]
	var v byte
	switch {
	case f >= '0' && f <= '9':
		v = f - '0'
	case f >= 'a' && f <= 'f':
		v = f - 'a' + 10
	default:
		return false
	}
	return v&1 == 0
}
