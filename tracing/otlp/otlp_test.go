package otlp

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/tracing"
)

// TestOTLPCollectorDown: the real OTLP exporters, both protocols, aimed at
// a port nobody listens on: spans end without waiting, Shutdown returns
// within its bound, and the failed export is counted.
func TestOTLPCollectorDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nobody listens there now
	for _, proto := range []string{tracing.ProtocolGRPC, tracing.ProtocolHTTP} {
		t.Run(proto, func(t *testing.T) {
			env := map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": "http://" + addr,
				"OTEL_EXPORTER_OTLP_PROTOCOL": proto,
				"OTEL_SERVICE_NAME":           "walbox-test",
			}
			for k, v := range env {
				t.Setenv(k, v) // the exporters read the process environment
			}
			reg := prometheus.NewPedanticRegistry()
			tr, err := New(context.Background(), tracing.Config{ExportTimeout: 500 * time.Millisecond, BatchDelay: time.Hour}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, nil, reg)
			if err != nil || tr == nil {
				t.Fatalf("New: %v, %v", tr, err)
			}
			for range 100 {
				rec := &kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
				tr.End(tr.Start(rec, tracing.Event{}), rec, nil)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown: %v", err)
			}
			want := `
# HELP walbox_tracing_spans_dropped_total Producer spans dropped instead of exported, by reason: queue_full (the export queue was full) or export_failed (the collector refused, failed or timed out). Delivery is not affected.
# TYPE walbox_tracing_spans_dropped_total counter
walbox_tracing_spans_dropped_total{reason="export_failed"} 100
walbox_tracing_spans_dropped_total{reason="queue_full"} 0
`
			if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "walbox_tracing_spans_dropped_total"); err != nil {
				t.Error(err)
			}
		})
	}
}

func TestOffWithoutEndpoint(t *testing.T) {
	tr, err := New(context.Background(), tracing.Config{}, func(string) (string, bool) { return "", false }, nil, nil)
	if tr != nil || err != nil {
		t.Fatalf("New without an endpoint: %v, %v; want nil, nil", tr, err)
	}
}
