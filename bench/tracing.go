package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
)

// The tracing drains (Config.Tracing): walbox run with tracing on, over the
// same backlog as walbox's own drain, whose rows all carry a traceparent,
// sampled in one row of a hundred (load.go). The 1 % run uses the default
// parent-based sampler, so it traces the writer's sampled rows; the 100 %
// run OTEL_TRACES_SAMPLER=always_on, which traces every row. Spans go to
// an OTLP/HTTP sink in this process that accepts and counts them.
//
// The three runs follow walbox's own drain, off first again: the first
// drain of a backlog reads WAL the later ones find in the page cache, so
// comparing with it would favour tracing.
var tracingSlots = []string{"bench_walbox_trace0", "bench_walbox_trace1", "bench_walbox_trace100"}

// TracingCost is the drain rate with tracing on, relative to walbox's
// drain with tracing off.
type TracingCost struct {
	OffEventsPerSec  float64 `json:"off_events_per_sec"`
	OnePctPerSec     float64 `json:"one_pct_events_per_sec"`
	AllPerSec        float64 `json:"all_events_per_sec"`
	OnePctRatio      float64 `json:"one_pct_ratio"` // the target: >= 0.95
	AllRatio         float64 `json:"all_ratio"`
	ExportRequests   int64   `json:"export_requests"`
	ExportedBytes    int64   `json:"exported_bytes"`
	OnePctRatioFloor float64 `json:"one_pct_ratio_floor"`
}

// tracingRatioFloor is the target for 1 % sampling.
const tracingRatioFloor = 0.95

// otlpSink is an OTLP/HTTP trace collector that accepts everything.
type otlpSink struct {
	srv            *http.Server
	addr           string
	requests, size atomic.Int64
}

func startOTLPSink() (*otlpSink, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &otlpSink{addr: ln.Addr().String()}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/traces", func(w http.ResponseWriter, r *http.Request) {
		n, _ := io.Copy(io.Discard, r.Body)
		s.requests.Add(1)
		s.size.Add(n)
		// An empty ExportTraceServiceResponse: everything accepted.
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *otlpSink) close() { _ = s.srv.Close() }

// NewWalboxTraced is walbox run exporting spans to the OTLP/HTTP endpoint
// addr: with ratio 1 it traces every row, otherwise the rows the writer
// sampled (ratio only names the run).
func (e *Env) NewWalboxTraced(bin, slot, prefix string, linger time.Duration, logPath, addr string, ratio float64) *walboxProc {
	w := e.NewWalboxProcess(bin, slot, prefix, linger, logPath)
	w.name = fmt.Sprintf("walbox-trace-%g%%", ratio*100)
	w.extraEnv = []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + addr,
		"OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf",
		"OTEL_SERVICE_NAME=walbox-bench",
	}
	if ratio >= 1 {
		w.extraEnv = append(w.extraEnv, "OTEL_TRACES_SAMPLER=always_on")
	}
	return w
}

// tracingDrains runs walbox with tracing off, 1 % and 100 % sampled, after
// walbox's own drain, and reports the traced rates relative to the
// untraced one.
func (r *Runner) tracingDrains(ctx context.Context, res *BacklogResult, n int, target pglogrepl.LSN, record func(DrainRun)) {
	offRun := r.drain(ctx, r.env.NewWalboxProcess(r.bin, tracingSlots[0], r.prefix("backlog", "walbox-trace0"), r.cfg.WalboxLinger,
		filepath.Join(r.cfg.OutDir, "walbox-trace0-backlog.log")), n, target, res.PayloadBytes, 0, nil, nil)
	offRun.Relay = "walbox-trace-off"
	record(offRun)
	if offRun.Error != "" {
		return
	}
	off := offRun.EventsPerSec
	sink, err := startOTLPSink()
	if err != nil {
		r.fail("backlog tracing", err)
		return
	}
	defer sink.close()
	rates := make([]float64, 2)
	for i, ratio := range []float64{0.01, 1} {
		w := r.env.NewWalboxTraced(r.bin, tracingSlots[i+1], r.prefix("backlog", fmt.Sprintf("walbox-trace%d", int(ratio*100))), r.cfg.WalboxLinger,
			filepath.Join(r.cfg.OutDir, fmt.Sprintf("walbox-trace%d-backlog.log", int(ratio*100))), sink.addr, ratio)
		run := r.drain(ctx, w, n, target, res.PayloadBytes, 0, nil, nil)
		record(run)
		if run.Error != "" {
			return
		}
		rates[i] = run.EventsPerSec
	}
	if off == 0 {
		r.fail("backlog tracing", errors.New("the drain with tracing off measured no rate"))
		return
	}
	tc := &TracingCost{
		OffEventsPerSec: off, OnePctPerSec: rates[0], AllPerSec: rates[1],
		OnePctRatio: rates[0] / off, AllRatio: rates[1] / off,
		ExportRequests: sink.requests.Load(), ExportedBytes: sink.size.Load(), OnePctRatioFloor: tracingRatioFloor,
	}
	res.Tracing = tc
	verdict := "meets"
	if tc.OnePctRatio < tracingRatioFloor {
		verdict = "MISSES"
	}
	r.progress("backlog: tracing off %.0f events/s; 1%% sampled %.0f (%.2f x, %s the %.2f x target); 100%% sampled %.0f (%.2f x); %d OTLP requests, %.1f MB",
		off, rates[0], tc.OnePctRatio, verdict, tracingRatioFloor, rates[1], tc.AllRatio, tc.ExportRequests, float64(tc.ExportedBytes)/1e6)
}
