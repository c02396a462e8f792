package snapshot_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
	"github.com/walbox/walbox/tracing"
)

// TestTakeoverTraced: the takeover's rows that carry a sampled trace
// context get producer spans under the row's span, marked replayed; the
// others none.
func TestTakeoverTraced(t *testing.T) {
	const (
		rowTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
		rowSpan  = "00f067aa0ba902b7"
	)
	e := newStateEnv(t)
	// Three of the 20 pending rows were written by a traced request.
	e.exec(`UPDATE public.outbox SET headers = jsonb_build_object('traceparent', $1::text) WHERE id IN (1, 2, 4)`,
		"00-"+rowTrace+"-"+rowSpan+"-01")
	exp := tracetest.NewInMemoryExporter()
	tr := tracing.NewWithExporter(tracing.Config{BatchDelay: time.Hour}, exp, nil, nil, nil, nil)
	t.Cleanup(func() { _ = tr.Shutdown(context.Background()) })
	c := &capture{}
	if _, err := snapshot.Takeover(e.ctx, snapshot.Options{
		ConnString: e.dsn,
		Slotctl:    slotctl.Config{CreateOnFirstStart: true},
		Snapshot:   snapshot.Config{Mode: snapshot.ModePending, Where: "sent_at IS NULL", Order: []string{"id"}, BatchRows: 7, Tracer: tr},
		Router:     e.rt, Producer: c, SlotBusyTimeout: 10 * time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	if err := tr.ForceFlush(e.ctx); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 3 || len(c.records()) != 20 {
		t.Fatalf("%d spans for %d records, want 3 for 20", len(spans), len(c.records()))
	}
	for _, s := range spans {
		replayed := false
		for _, kv := range s.Attributes {
			if kv.Key == tracing.AttrReplayed {
				replayed = kv.Value.AsBool()
			}
		}
		if s.Parent.SpanID().String() != rowSpan || !replayed {
			t.Errorf("span %s parent %s replayed %v, want under %s and replayed", s.Name, s.Parent.SpanID(), replayed, rowSpan)
		}
	}
}
