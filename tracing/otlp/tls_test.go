package otlp

import (
	"context"
	"crypto/tls"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/certtest"
	"github.com/walbox/walbox/tracing"
)

// TestTLSCollectorWithHeaders: an https endpoint, the collector's CA from
// OTEL_EXPORTER_OTLP_CERTIFICATE and an authorization header from
// OTEL_EXPORTER_OTLP_HEADERS; without the CA the export fails and is
// counted.
func TestTLSCollectorWithHeaders(t *testing.T) {
	ca := certtest.NewCA(t, "collector-ca")
	var authorized, requests atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		if r.URL.Path == "/v1/traces" && r.Header.Get("Authorization") == "Bearer s3cret" {
			authorized.Add(1)
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.Server(t, "127.0.0.1").TLS(t)}}
	srv.StartTLS()
	defer srv.Close()

	for _, tc := range []struct {
		name     string
		withCA   bool
		accepted bool
	}{
		{"with the CA", true, true},
		{"without the CA", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			authorized.Store(0)
			env := map[string]string{
				"OTEL_EXPORTER_OTLP_ENDPOINT": srv.URL, // https://127.0.0.1:port
				"OTEL_EXPORTER_OTLP_PROTOCOL": tracing.ProtocolHTTP,
				"OTEL_EXPORTER_OTLP_HEADERS":  "authorization=Bearer s3cret",
				"OTEL_EXPORTER_OTLP_TIMEOUT":  "2000",
			}
			if tc.withCA {
				env["OTEL_EXPORTER_OTLP_CERTIFICATE"] = ca.CertFile
			}
			for k, v := range env {
				t.Setenv(k, v)
			}
			reg := prometheus.NewPedanticRegistry()
			tr, err := New(context.Background(), tracing.Config{BatchDelay: time.Hour, ExportTimeout: 2 * time.Second}, func(k string) (string, bool) { v, ok := env[k]; return v, ok }, nil, reg)
			if err != nil || tr == nil {
				t.Fatalf("New: %v, %v", tr, err)
			}
			rec := &kgo.Record{Topic: "orders", Headers: []kgo.RecordHeader{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}}
			tr.End(tr.Start(rec, tracing.Event{}), rec, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if err := tr.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if got := authorized.Load() > 0; got != tc.accepted {
				t.Errorf("collector received an authorized export: %v, want %v (requests %d)", got, tc.accepted, requests.Load())
			}
			failed := gatherValue(t, reg, "walbox_tracing_spans_dropped_total", "export_failed")
			if want := map[bool]float64{true: 0, false: 1}[tc.accepted]; failed != want {
				t.Errorf("export_failed = %v, want %v", failed, want)
			}
		})
	}
}

func gatherValue(t *testing.T, reg prometheus.Gatherer, name, reason string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "reason" && l.GetValue() == reason {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return -1
}
