package tracing

import (
	"context"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// discard is a collector that accepts everything at once.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// BenchmarkStartEnd is the relay's per-event cost: off (nil Tracer), a row
// whose trace is not sampled, a row traced.
func BenchmarkStartEnd(b *testing.B) {
	for _, bc := range []struct {
		name string
		on   bool
		tp   string
	}{
		{"off", false, sampled},
		{"unsampled", true, unsampled},
		{"ratio-0.01", true, sampled},
		{"sampled", true, sampled},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var tr *Tracer
			if bc.on {
				var s sdktrace.Sampler
				if bc.name == "ratio-0.01" {
					s = sdktrace.TraceIDRatioBased(0.01)
				}
				tr = NewWithExporter(Config{QueueSize: 1 << 16}, discard{}, s, nil, nil, nil)
				defer tr.Shutdown(context.Background())
			}
			ev := Event{ReadAt: time.Now(), CommitLSN: 0x16B374D848, CommitTime: time.Now(), EventID: "9f1a2b3c-0000-4000-8000-000000000001"}
			b.ReportAllocs()
			for b.Loop() {
				rec := record(bc.tp)
				tr.End(tr.Start(rec, ev), rec, nil)
			}
		})
	}
}
