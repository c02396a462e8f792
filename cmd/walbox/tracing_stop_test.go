package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/tracing"
)

// hungExporter never answers: a collector that accepted the connection
// and went silent.
type hungExporter struct{}

func (hungExporter) ExportSpans(ctx context.Context, _ []sdktrace.ReadOnlySpan) error {
	<-ctx.Done()
	return ctx.Err()
}
func (hungExporter) Shutdown(context.Context) error { return nil }

// TestShutdownTracerBoundedByAHungCollector: at stop the spans still
// queued are exported for at most shutdownTracer's 5 s (docs/tracing.md), so
// a collector that hangs does not hold up walbox's exit; the spans given up
// are logged.
func TestShutdownTracerBoundedByAHungCollector(t *testing.T) {
	t.Parallel() // waits out the 5 s; shares nothing
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	tr := tracing.NewWithExporter(tracing.Config{BatchDelay: time.Hour, ExportTimeout: time.Hour}, hungExporter{}, nil, nil, log, nil)
	for range 10 {
		rec := &kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{
			{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
		tr.End(tr.Start(rec, tracing.Event{}), rec, nil)
	}
	done := make(chan struct{})
	go func() { shutdownTracer(tr, log); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatal("shutdownTracer still waiting for a hung collector after a minute")
	}
	if out := logs.String(); !strings.Contains(out, "spans still queued at stop were not exported") {
		t.Errorf("the spans given up at stop were not logged:\n%s", out)
	}
}
