package tracing

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// stuckExporter is a collector that hangs until released, or refuses.
type stuckExporter struct {
	release chan struct{}
	refuse  error
	mu      sync.Mutex
	calls   int
}

func (e *stuckExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	e.mu.Lock()
	e.calls++
	e.mu.Unlock()
	if e.refuse != nil {
		return e.refuse
	}
	select {
	case <-e.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *stuckExporter) Shutdown(context.Context) error { return nil }

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCollectorDownNeverBlocks: with the collector hanging, ending spans
// never waits; what does not fit in the queue is dropped, counted and
// logged once per interval.
func TestCollectorDownNeverBlocks(t *testing.T) {
	exp := &stuckExporter{release: make(chan struct{})}
	reg := prometheus.NewPedanticRegistry()
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	tr := NewWithExporter(Config{QueueSize: 8, BatchSize: 4, BatchDelay: time.Millisecond, ExportTimeout: time.Hour}, exp, nil, nil, log, reg)
	const n = 1000
	for range n {
		rec := record(sampled)
		tr.End(tr.Start(rec, Event{}), rec, nil)
	}
	// At most the queue and one batch in the exporter are held; the rest
	// is dropped, and counted.
	dropped := testutil.ToFloat64(tr.queue.full)
	if dropped < n-8-4 {
		t.Fatalf("dropped %v of %d spans with a queue of 8 and a hung collector, want at least %d", dropped, n, n-12)
	}
	// One log line for all of them (the interval is a minute).
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "dropped producer spans") {
		if time.Now().After(deadline) {
			t.Fatalf("no log of dropped spans; log: %s", logs.String())
		}
		time.Sleep(10 * time.Millisecond) // polling the log
	}
	for range n {
		rec := record(sampled)
		tr.End(tr.Start(rec, Event{}), rec, nil)
	}
	close(exp.release)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	// Shutdown logs what was dropped since: two lines in all.
	if c := strings.Count(logs.String(), "dropped producer spans"); c != 2 {
		t.Errorf("%d log lines of dropped spans, want 2 (one within the minute, one at shutdown); log:\n%s", c, logs.String())
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestCollectorRefusingCountsExportFailures: a refusing collector's
// batches are counted as export_failed.
func TestCollectorRefusingCountsExportFailures(t *testing.T) {
	exp := &stuckExporter{refuse: errors.New("rpc error: code = Unavailable")}
	reg := prometheus.NewPedanticRegistry()
	tr := NewWithExporter(Config{BatchDelay: time.Hour}, exp, nil, nil, nil, reg)
	for range 10 {
		rec := record(sampled)
		tr.End(tr.Start(rec, Event{}), rec, nil)
	}
	if err := tr.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	want := `
# HELP walbox_tracing_spans_dropped_total Producer spans dropped instead of exported, by reason: queue_full (the export queue was full) or export_failed (the collector refused, failed or timed out). Delivery is not affected.
# TYPE walbox_tracing_spans_dropped_total counter
walbox_tracing_spans_dropped_total{reason="export_failed"} 10
walbox_tracing_spans_dropped_total{reason="queue_full"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "walbox_tracing_spans_dropped_total"); err != nil {
		t.Error(err)
	}
}

func mapEnv(m map[string]string) Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name    string
		env     map[string]string
		enabled bool
		proto   string
		sampler string
		wantErr string
	}{
		{name: "nothing set: off"},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}, enabled: true, proto: ProtocolHTTP, sampler: "ParentBased{root:AlwaysOnSampler"},
		{name: "traces endpoint, grpc", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4317", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, enabled: true, proto: ProtocolGRPC},
		{name: "traces protocol wins", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/protobuf", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "grpc"}, enabled: true, proto: ProtocolGRPC},
		{name: "sdk disabled", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_SDK_DISABLED": "true"}},
		{name: "exporter none", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_EXPORTER": "none"}},
		{name: "exporter zipkin", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, wantErr: `OTEL_TRACES_EXPORTER="zipkin"`},
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_EXPORTER_OTLP_PROTOCOL": "http/json"}, wantErr: `OTEL_EXPORTER_OTLP_PROTOCOL="http/json"`},
		{name: "ratio", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"}, enabled: true, proto: ProtocolHTTP, sampler: "ParentBased{root:TraceIDRatioBased{0.01}"},
		{name: "bad ratio", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_SAMPLER": "traceidratio", "OTEL_TRACES_SAMPLER_ARG": "2"}, wantErr: `OTEL_TRACES_SAMPLER_ARG="2"`},
		{name: "bad sampler", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_TRACES_SAMPLER": "jaeger_remote"}, wantErr: `OTEL_TRACES_SAMPLER="jaeger_remote"`},
		{name: "bad queue size", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_BSP_MAX_QUEUE_SIZE": "-1"}, wantErr: `OTEL_BSP_MAX_QUEUE_SIZE="-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, _, err := FromEnv(mapEnv(tc.env), Config{})
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.Enabled != tc.enabled || (tc.proto != "" && s.Protocol != tc.proto) {
				t.Errorf("enabled %v protocol %q, want %v %q", s.Enabled, s.Protocol, tc.enabled, tc.proto)
			}
			if tc.sampler != "" && !strings.HasPrefix(s.Sampler.Description(), tc.sampler) {
				t.Errorf("sampler %s, want %s...", s.Sampler.Description(), tc.sampler)
			}
		})
	}
	_, c, err := FromEnv(mapEnv(map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "x", "OTEL_BSP_MAX_QUEUE_SIZE": "10", "OTEL_BSP_SCHEDULE_DELAY": "250"}), Config{})
	if err != nil || c.QueueSize != 10 || c.BatchDelay != 250*time.Millisecond {
		t.Errorf("OTEL_BSP_*: %+v %v, want queue 10, delay 250ms", c, err)
	}
}
