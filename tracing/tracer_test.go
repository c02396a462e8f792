package tracing

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/walbox/walbox/router"
)

const (
	rowTraceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	rowSpanID  = "00f067aa0ba902b7"
	sampled    = "00-" + rowTraceID + "-" + rowSpanID + "-01"
	unsampled  = "00-" + rowTraceID + "-" + rowSpanID + "-00"
)

// newTestTracer returns a Tracer exporting to an in-memory exporter.
func newTestTracer(t *testing.T, cfg Config) (*Tracer, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	cfg.BatchDelay = time.Hour // flushed explicitly
	tr := NewWithExporter(cfg, exp, nil, nil, nil, nil)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	return tr, exp
}

// spans flushes tr and returns what it exported.
func spans(t *testing.T, tr *Tracer, exp *tracetest.InMemoryExporter) tracetest.SpanStubs {
	t.Helper()
	if err := tr.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	return exp.GetSpans()
}

func record(traceparent string) *kgo.Record {
	rec := &kgo.Record{Topic: "orders", Key: []byte("order-7"), Value: []byte(`{}`)}
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: router.HeaderEventID, Value: []byte("ev-1")})
	if traceparent != "" {
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "traceparent", Value: []byte(traceparent)})
	}
	return rec
}

func attrs(s tracetest.SpanStub) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes {
		m[kv.Key] = kv.Value
	}
	return m
}

func TestNilTracerTracesNothing(t *testing.T) {
	var tr *Tracer
	rec := record(sampled)
	ctx := tr.Start(rec, Event{})
	if ctx != context.Background() {
		t.Fatalf("nil Tracer: Start returned %v, want context.Background()", ctx)
	}
	tr.End(ctx, rec, nil)
	if !tr.Now().IsZero() {
		t.Fatal("nil Tracer: Now read the clock")
	}
	if got := headerValue(rec.Headers, "traceparent"); got != sampled {
		t.Fatalf("traceparent changed to %q", got)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// TestProducerSpanIsChildOfRow: the span of a row whose trace was sampled
// is a producer span under the row's span, from the transaction's read to
// the ack, with the messaging attributes, and the outgoing traceparent
// names it.
func TestProducerSpanIsChildOfRow(t *testing.T) {
	tr, exp := newTestTracer(t, Config{})
	readAt := time.Now().Add(-2 * time.Second)
	commit := readAt.Add(-time.Second)
	rec := record(sampled)
	ctx := tr.Start(rec, Event{ReadAt: readAt, CommitLSN: pglogrepl.LSN(0x16B374D848), CommitTime: commit, EventID: "ev-1"})
	rec.Partition, rec.Offset = 3, 42
	tr.End(ctx, rec, nil)

	got := spans(t, tr, exp)
	if len(got) != 1 {
		t.Fatalf("%d spans exported, want 1", len(got))
	}
	s := got[0]
	if s.Name != "send orders" || s.SpanKind != trace.SpanKindProducer {
		t.Errorf("span %q kind %v, want \"send orders\" producer", s.Name, s.SpanKind)
	}
	if s.Parent.TraceID().String() != rowTraceID || s.Parent.SpanID().String() != rowSpanID {
		t.Errorf("parent %s/%s, want the row's %s/%s", s.Parent.TraceID(), s.Parent.SpanID(), rowTraceID, rowSpanID)
	}
	if s.SpanContext.TraceID().String() != rowTraceID {
		t.Errorf("trace %s, want the row's %s", s.SpanContext.TraceID(), rowTraceID)
	}
	if !s.StartTime.Equal(readAt) {
		t.Errorf("start %v, want the transaction's read time %v", s.StartTime, readAt)
	}
	if s.Status.Code != codes.Unset {
		t.Errorf("status %v %q, want unset", s.Status.Code, s.Status.Description)
	}
	a := attrs(s)
	for k, want := range map[attribute.Key]string{
		"messaging.system":                   "kafka",
		"messaging.destination.name":         "orders",
		"messaging.operation.type":           "send",
		"messaging.message.id":               "ev-1",
		"messaging.destination.partition.id": "3",
		AttrCommitLSN:                        "16/B374D848",
		AttrCommitTime:                       commit.UTC().Format(time.RFC3339Nano),
	} {
		if got := a[k].Emit(); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	if got := a["messaging.kafka.offset"].AsInt64(); got != 42 {
		t.Errorf("messaging.kafka.offset = %d, want 42", got)
	}
	if w := a[AttrWaitBeforeProduce].AsFloat64(); w < 2 {
		t.Errorf("%s = %v, want at least the 2 s since the read", AttrWaitBeforeProduce, w)
	}
	if w := a[AttrCommitToRead].AsFloat64(); w != 1 {
		t.Errorf("%s = %v, want 1", AttrCommitToRead, w)
	}
	if _, ok := a[AttrReplayed]; ok {
		t.Errorf("%s set on a live event", AttrReplayed)
	}
	if len(s.Events) != 1 || s.Events[0].Name != "produce" {
		t.Errorf("events %v, want one \"produce\"", s.Events)
	}
	want := "00-" + rowTraceID + "-" + s.SpanContext.SpanID().String() + "-01"
	if got := headerValue(rec.Headers, "traceparent"); got != want {
		t.Errorf("outgoing traceparent %q, want the producer span's %q", got, want)
	}
}

func TestOutgoingRowKeepsTraceparent(t *testing.T) {
	tr, exp := newTestTracer(t, Config{Outgoing: OutgoingRow})
	rec := record(sampled)
	tr.End(tr.Start(rec, Event{}), rec, nil)
	if n := len(spans(t, tr, exp)); n != 1 {
		t.Fatalf("%d spans, want 1", n)
	}
	if got := headerValue(rec.Headers, "traceparent"); got != sampled {
		t.Fatalf("traceparent %q, want the row's %q", got, sampled)
	}
}

// TestNoSpanWithoutSampledContext: sampling follows the writer, and rows
// without a (valid) trace context get no span; their headers go out as
// they came.
func TestNoSpanWithoutSampledContext(t *testing.T) {
	for _, mode := range []ParentMode{ParentChild, ParentLink} {
		for _, tc := range []struct{ name, traceparent string }{
			{"unsampled", unsampled},
			{"none", ""},
			{"invalid", "00-zz-yy-01"},
		} {
			t.Run(string(mode)+"/"+tc.name, func(t *testing.T) {
				tr, exp := newTestTracer(t, Config{Parent: mode})
				rec := record(tc.traceparent)
				ctx := tr.Start(rec, Event{})
				if ctx != context.Background() {
					t.Errorf("Start returned a span context")
				}
				tr.End(ctx, rec, nil)
				if n := len(spans(t, tr, exp)); n != 0 {
					t.Errorf("%d spans, want 0", n)
				}
				if got := headerValue(rec.Headers, "traceparent"); got != tc.traceparent {
					t.Errorf("traceparent %q, want %q unchanged", got, tc.traceparent)
				}
			})
		}
	}
}

func TestParentLinkStartsLinkedTrace(t *testing.T) {
	tr, exp := newTestTracer(t, Config{Parent: ParentLink})
	rec := record(sampled)
	tr.End(tr.Start(rec, Event{}), rec, nil)
	got := spans(t, tr, exp)
	if len(got) != 1 {
		t.Fatalf("%d spans, want 1", len(got))
	}
	s := got[0]
	if s.Parent.IsValid() {
		t.Errorf("parent %v, want a root span", s.Parent)
	}
	if s.SpanContext.TraceID().String() == rowTraceID {
		t.Error("linked span is in the row's trace")
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID().String() != rowSpanID {
		t.Errorf("links %v, want one to the row's span %s", s.Links, rowSpanID)
	}
}

func TestFailuresMarkSpanError(t *testing.T) {
	tr, exp := newTestTracer(t, Config{})
	refused := record(sampled)
	tr.End(tr.Start(refused, Event{}), refused, kgo.ErrRecordTimeout)

	dl := record(sampled)
	dl.Topic = "dlq"
	dl.Headers = append(dl.Headers, kgo.RecordHeader{Key: router.HeaderError, Value: []byte("payload is not JSON")})
	tr.End(tr.Start(dl, Event{DeadLetter: true}), dl, nil)

	got := spans(t, tr, exp)
	if len(got) != 2 {
		t.Fatalf("%d spans, want 2", len(got))
	}
	if s := got[0]; s.Status.Code != codes.Error || s.Status.Description != kgo.ErrRecordTimeout.Error() {
		t.Errorf("refused record: status %v %q, want error %q", s.Status.Code, s.Status.Description, kgo.ErrRecordTimeout)
	}
	if s := got[1]; s.Status.Code != codes.Error || s.Status.Description != "dead-lettered: payload is not JSON" || !attrs(s)[AttrDeadLetter].AsBool() {
		t.Errorf("dead-lettered row: status %v %q attrs %v, want error with the reason", s.Status.Code, s.Status.Description, s.Attributes)
	}
}

// TestContextHeaderProperties: another header, holding a traceparent or
// the java.util.Properties text of Debezium's tracing.span.context.field.
func TestContextHeaderProperties(t *testing.T) {
	for _, v := range []string{
		sampled,
		"#Mon Dec 01 10:00:00 UTC 2026\ntraceparent=" + sampled + "\n",
		"traceparent: " + sampled,
	} {
		tr, exp := newTestTracer(t, Config{ContextHeader: "tracingspancontext"})
		rec := record("")
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: "tracingspancontext", Value: []byte(v)})
		tr.End(tr.Start(rec, Event{}), rec, nil)
		got := spans(t, tr, exp)
		if len(got) != 1 || got[0].Parent.SpanID().String() != rowSpanID {
			t.Errorf("header %q: spans %v, want one under %s", v, got, rowSpanID)
			continue
		}
		if tp := headerValue(rec.Headers, "traceparent"); tp == "" {
			t.Errorf("header %q: no outgoing traceparent", v)
		}
	}
}

func TestReplayedAttribute(t *testing.T) {
	tr, exp := newTestTracer(t, Config{})
	rec := record(sampled)
	tr.End(tr.Start(rec, Event{Replayed: true}), rec, errors.New("x"))
	got := spans(t, tr, exp)
	if len(got) != 1 || !attrs(got[0])[AttrReplayed].AsBool() {
		t.Fatalf("spans %v, want one with %s=true", got, AttrReplayed)
	}
}

var _ sdktrace.SpanExporter = (*tracetest.InMemoryExporter)(nil)
