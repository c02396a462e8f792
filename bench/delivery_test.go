package bench

import (
	"bytes"
	"strings"
	"testing"
)

// TestDeliveryComparisons: the exactly-once runs are compared with the
// at-least-once walbox runs of the same scenario (never with the
// references, and not counted as references either), and the notes state
// both targets with their verdicts.
func TestDeliveryComparisons(t *testing.T) {
	res := &Results{
		Settings: Settings{EOSTxnIntervalMs: 100},
		Backlog: &BacklogResult{Runs: []DrainRun{
			{Relay: "walbox", EventsPerSec: 50000, CPUMicrosPerEvent: 10},
			{Relay: "walbox-eos", EventsPerSec: 45000, CPUMicrosPerEvent: 12},
			{Relay: "ceiling", EventsPerSec: 100000},
		}},
		Steady: &SteadyResult{TargetRate: 5000, Runs: []SteadyRun{
			{Relay: "walbox", Latency: LatencyStats{P50Ms: 2, P99Ms: 10}},
			{Relay: "walbox-eos", Latency: LatencyStats{P50Ms: 60, P99Ms: 160}},
		}},
	}
	got := map[string]float64{}
	for _, c := range compareDelivery(res) {
		if c.Reference != "at-least-once" {
			t.Errorf("comparison %q against %q, want at-least-once", c.Metric, c.Reference)
		}
		got[c.Scenario+" "+strings.Fields(c.Metric)[1]] = c.Ratio
	}
	want := map[string]float64{"backlog throughput": 0.9, "backlog relay": 1.2, "steady p50": 30, "steady p99": 16}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %v, want %v (all: %v)", k, got[k], v, got)
		}
	}
	for _, c := range compare(res) {
		if c.Reference == eosName {
			t.Errorf("walbox compared with its own exactly-once run as a reference: %+v", c)
		}
	}
	notes := strings.Join(deliveryNotes(res), "\n")
	for _, w := range []string{
		"45,000 events/s, 0.90x at-least-once's 50,000 (target >= 0.8x): met",
		"p99 at 5,000 events/s: 160.0 ms",
		"target < 50 ms + the transaction interval 100ms = 150 ms: MISSED",
	} {
		if !strings.Contains(notes, w) {
			t.Errorf("notes lack %q:\n%s", w, notes)
		}
	}
	res.Comparisons = append(compare(res), compareDelivery(res)...)
	var b bytes.Buffer
	PrintTable(&b, res)
	if !strings.Contains(b.String(), "walbox exactly-once throughput (events/s, target >= 0.8x): 0.90x at-least-once") {
		t.Errorf("table lacks the exactly-once ratio:\n%s", b.String())
	}
	if len(deliveryNotes(&Results{Backlog: &BacklogResult{Runs: []DrainRun{{Relay: "walbox", EventsPerSec: 1}}}})) != 0 {
		t.Error("notes about exactly-once without an exactly-once run")
	}
}
