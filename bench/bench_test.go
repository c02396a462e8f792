package bench

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// These tests cover the arithmetic and formatting the figures depend on.
// They start no server: the benchmark itself is `go run ./cmd/walbox-bench`,
// not part of the test suite.

func TestLatencyStats(t *testing.T) {
	tests := []struct {
		name string
		in   []time.Duration
		want LatencyStats
	}{
		{name: "empty", in: nil, want: LatencyStats{}},
		{
			name: "one to a hundred ms",
			in: func() []time.Duration {
				var l []time.Duration
				for i := 100; i >= 1; i-- { // unsorted on purpose
					l = append(l, time.Duration(i)*time.Millisecond)
				}
				return l
			}(),
			want: LatencyStats{N: 100, P50Ms: 50, P95Ms: 95, P99Ms: 99, MaxMs: 100, MeanMs: 50.5},
		},
		{
			// The consumer can see an event before the writer's Exec
			// returns; such latencies count as zero, not as negative.
			name: "negative clamped",
			in:   []time.Duration{-time.Millisecond, 2 * time.Millisecond},
			want: LatencyStats{N: 2, P50Ms: 0, P95Ms: 2, P99Ms: 2, MaxMs: 2, MeanMs: 1, Negative: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := latencyStats(tt.in); got != tt.want {
				t.Errorf("latencyStats = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestGeneratorRows(t *testing.T) {
	g := newGenerator(1, 10)
	var r row
	seen := map[string]bool{}
	for id := int64(1); id <= 1000; id++ {
		g.next(id, &r)
		if len(r.payload) != payloadSize {
			t.Fatalf("payload of id %d is %d bytes, want %d: %s", id, len(r.payload), payloadSize, r.payload)
		}
		var p map[string]any
		if err := json.Unmarshal(r.payload, &p); err != nil {
			t.Fatalf("payload of id %d is not JSON: %v: %s", id, err, r.payload)
		}
		var h map[string]string
		if err := json.Unmarshal(r.headers, &h); err != nil || len(h["traceparent"]) != 55 || h["correlation_id"] == "" {
			t.Fatalf("headers of id %d: %v: %s", id, err, r.headers)
		}
		// One row in a hundred is sampled by the writer (tracing.go).
		if sampled := strings.HasSuffix(h["traceparent"], "-01"); sampled != (id%100 == 0) {
			t.Fatalf("id %d: traceparent %s, want sampled %v", id, h["traceparent"], id%100 == 0)
		}
		if !strings.HasPrefix(r.aggID, r.aggType+"-") || r.eventType != r.aggType+".updated" {
			t.Fatalf("id %d: aggregate %q of type %q, event type %q", id, r.aggID, r.aggType, r.eventType)
		}
		seen[r.aggID] = true
	}
	if len(seen) != 10 {
		t.Errorf("1000 events touched %d aggregates, want all 10", len(seen))
	}
}

func TestInsertSQL(t *testing.T) {
	got := insertSQL(2)
	want := "INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES " +
		"($1,$2,$3,$4,$5,$6),($7,$8,$9,$10,$11,$12)"
	if got != want {
		t.Errorf("insertSQL(2) =\n%s\nwant\n%s", got, want)
	}
}

func TestThousands(t *testing.T) {
	for in, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -5000: "-5,000"} {
		if got := thousands(in); got != want {
			t.Errorf("thousands(%d) = %q, want %q", in, got, want)
		}
	}
}

func TestDBCostMinusBaseline(t *testing.T) {
	// The writer alone: 700 B and 100 ms of Postgres CPU per event.
	base := dbCost(dbSnap{wal: 0}, dbSnap{wal: 7000, pgCPU: time.Second}, 10)
	run := dbCost(dbSnap{wal: 100, tupUpd: 5}, dbSnap{wal: 100 + 15000, tupUpd: 15, pgCPU: 3 * time.Second}, 10)
	got := run.minus(base, 10)
	if got.WALBytesPerEvent != 800 || got.WALBytes != 8000 {
		t.Errorf("extra WAL = %v B/event, %d B; want 800, 8000", got.WALBytesPerEvent, got.WALBytes)
	}
	if got.TupleUpdatesPerEvent != 1 {
		t.Errorf("extra updates = %v per event, want 1", got.TupleUpdatesPerEvent)
	}
	if got.PGCPUSeconds < 1.999 || got.PGCPUSeconds > 2.001 {
		t.Errorf("extra Postgres CPU = %v s, want 2", got.PGCPUSeconds)
	}
}

func TestCDFIsMonotonic(t *testing.T) {
	var l []time.Duration
	for i := range 10000 {
		l = append(l, time.Duration(i)*time.Microsecond)
	}
	xy := cdf(l, 200)
	for i := 1; i < len(xy); i++ {
		if xy[i].X < xy[i-1].X || xy[i].Y < xy[i-1].Y {
			t.Fatalf("point %d (%v) before point %d (%v)", i-1, xy[i-1], i, xy[i])
		}
	}
	if last := xy[len(xy)-1]; last.Y < 0.999 {
		t.Errorf("CDF ends at %v, want about 1", last.Y)
	}
}

func TestCompareRatios(t *testing.T) {
	res := &Results{Backlog: &BacklogResult{Runs: []DrainRun{
		{Relay: "walbox", EventsPerSec: 50000, DB: DBCost{PGCPUMsPer1kEvents: 10}},
		{Relay: "ceiling", EventsPerSec: 100000, DB: DBCost{PGCPUMsPer1kEvents: 10}},
		{Relay: "poll-100", EventsPerSec: 5000, DB: DBCost{PGCPUMsPer1kEvents: 40}},
		{Relay: "poll-1000", Error: "boom"},
	}}}
	got := map[string]float64{}
	for _, c := range compare(res) {
		got[c.Metric[:10]+" "+c.Reference] = c.Ratio
	}
	want := map[string]float64{
		"throughput ceiling": 0.5, "throughput poll-100": 10,
		"Postgres C ceiling": 1, "Postgres C poll-100": 0.25,
	}
	if len(got) != len(want) {
		t.Fatalf("comparisons = %v, want %v (failed runs are left out)", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v", k, got[k], v)
		}
	}
}

// TestPlotLatencyWritesSVG checks the plot drawn without a plotting
// library: well-formed XML naming every relay.
func TestPlotLatencyWritesSVG(t *testing.T) {
	var lat []time.Duration
	for i := range 1000 {
		lat = append(lat, time.Duration(i+1)*50*time.Microsecond)
	}
	res := &Results{Steady: &SteadyResult{TargetRate: 5000, Runs: []SteadyRun{
		{Relay: "walbox", latencies: lat},
		{Relay: "poll-100 <&>", latencies: lat},
	}}}
	path := filepath.Join(t.TempDir(), "latency.svg")
	ok, err := PlotLatency(path, res)
	if err != nil || !ok {
		t.Fatalf("PlotLatency = %v, %v; want true, nil", ok, err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("latency.svg is not well-formed XML: %v", err)
		}
	}
	for _, want := range []string{"walbox (p50", "poll-100 &lt;&amp;&gt;", "<polyline"} {
		if !bytes.Contains(b, []byte(want)) {
			t.Errorf("latency.svg lacks %q", want)
		}
	}
}

// TestPeakRSSOfEveryWalboxRun checks that the summary lists every walbox
// process run, largest first, and that the table flags one above 64 MiB.
// Before, only the large transaction's walbox run had a peak RSS.
func TestPeakRSSOfEveryWalboxRun(t *testing.T) {
	res := &Results{
		Backlog:  &BacklogResult{Events: 1000, Runs: []DrainRun{{Relay: "walbox", Events: 1000, PeakRSSBytes: 40 << 20}, {Relay: "ceiling", Events: 1000}}},
		Steady:   &SteadyResult{TargetRate: 5000, Runs: []SteadyRun{{Relay: "walbox", PeakRSSBytes: 30 << 20}}},
		LargeTxn: &LargeTxnResult{Runs: []DrainRun{{Relay: "walbox", Events: 10, PeakRSSBytes: 50 << 20}}},
		Payload:  &PayloadResult{Rows: 5, PayloadBytes: 990000, Runs: []DrainRun{{Relay: "walbox", Events: 5, PeakRSSBytes: 70 << 20}}},
	}
	res.PeakRSS = peakRSSSummary(res)
	var got []int64
	for _, f := range res.PeakRSS {
		got = append(got, f.Bytes>>20)
	}
	if want := []int64{70, 50, 40, 30}; !slices.Equal(got, want) {
		t.Fatalf("peak RSS summary = %v MiB, want %v", got, want)
	}
	var b bytes.Buffer
	PrintTable(&b, res)
	table := strings.Join(strings.Fields(b.String()), " ")
	for _, want := range []string{"large payloads, 5 rows of 990,000 bytes 70.0 MiB ABOVE TARGET", "steady load, 5,000 events/s 30.0 MiB met"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
}
