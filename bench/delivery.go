package bench

import (
	"fmt"
	"time"
)

// eosName is the relay name of walbox run with --delivery exactly-once. Its
// runs sit next to the at-least-once "walbox" runs of the same scenario, on
// the same backlog (backlog drain) or the same load (steady load).
const eosName = "walbox-eos"

// NewWalboxEOS returns walbox run from bin like NewWalboxProcess, with
// --delivery exactly-once, Kafka transactions of at most interval (walbox's
// --transaction-max-interval; 0 leaves walbox's default) and its state in
// the topic <prefix>.state, outside the topics the drain and the consumer
// read.
func (e *Env) NewWalboxEOS(bin, slot, prefix string, linger, interval time.Duration, logPath string) *walboxProc {
	w := e.NewWalboxProcess(bin, slot, prefix, linger, logPath)
	w.name = eosName
	w.args = []string{"--delivery", "exactly-once", "--state-topic", prefix + ".state"}
	if interval > 0 {
		w.args = append(w.args, "--transaction-max-interval", interval.String())
	}
	return w
}

// eosP99BudgetMs is the latency target for exactly-once at the
// steady load: p99 under this plus the transaction interval.
const eosP99BudgetMs = 50

// eosDrainTarget is the throughput target: exactly-once drains at
// least this share of at-least-once's rate.
const eosDrainTarget = 0.8

// compareDelivery expresses the exactly-once runs' figures as ratios to the
// at-least-once runs of the same scenario.
func compareDelivery(res *Results) []Comparison {
	var out []Comparison
	add := func(scenario, metric, better string, eos, alo float64) {
		if alo == 0 {
			return
		}
		out = append(out, Comparison{Scenario: scenario, Metric: metric, Reference: "at-least-once", Walbox: eos, Other: alo, Ratio: eos / alo, Better: better})
	}
	if b := res.Backlog; b != nil {
		alo, eos := findDrain(b.Runs, walboxName), findDrain(b.Runs, eosName)
		if alo != nil && eos != nil {
			add("backlog", fmt.Sprintf("exactly-once throughput (events/s, target >= %.1fx)", eosDrainTarget), "higher", eos.EventsPerSec, alo.EventsPerSec)
			add("backlog", "exactly-once relay CPU per event (lower is better)", "lower", eos.CPUMicrosPerEvent, alo.CPUMicrosPerEvent)
		}
	}
	if s := res.Steady; s != nil {
		alo, eos := findSteady(s.Runs, walboxName), findSteady(s.Runs, eosName)
		if alo != nil && eos != nil {
			add("steady", "exactly-once p50 latency (lower is better)", "lower", eos.Latency.P50Ms, alo.Latency.P50Ms)
			add("steady", "exactly-once p99 latency (lower is better)", "lower", eos.Latency.P99Ms, alo.Latency.P99Ms)
		}
	}
	return out
}

// deliveryNotes states the exactly-once targets and whether this run met
// them; nothing when no exactly-once run took place.
func deliveryNotes(res *Results) []string {
	var n []string
	interval := time.Duration(res.Settings.EOSTxnIntervalMs * float64(time.Millisecond))
	if b := res.Backlog; b != nil {
		if alo, eos := findDrain(b.Runs, walboxName), findDrain(b.Runs, eosName); alo != nil && eos != nil && alo.EventsPerSec > 0 {
			ratio := eos.EventsPerSec / alo.EventsPerSec
			n = append(n, fmt.Sprintf("Exactly-once backlog drain: %s events/s, %.2fx at-least-once's %s (target >= %.1fx): %s.",
				thousands(int(eos.EventsPerSec)), ratio, thousands(int(alo.EventsPerSec)), eosDrainTarget, verdict(ratio >= eosDrainTarget)))
		}
	}
	if s := res.Steady; s != nil {
		if eos := findSteady(s.Runs, eosName); eos != nil {
			budget := eosP99BudgetMs + float64(interval)/float64(time.Millisecond)
			n = append(n, fmt.Sprintf("Exactly-once p99 at %s events/s: %.1f ms (p50 %.1f ms, %d duplicates); target < %d ms + the transaction interval %s = %.0f ms: %s.",
				thousands(s.TargetRate), eos.Latency.P99Ms, eos.Latency.P50Ms, eos.Duplicates, eosP99BudgetMs, interval, budget, verdict(eos.Latency.P99Ms < budget)))
		}
	}
	if len(n) > 0 {
		n = append(n, fmt.Sprintf("walbox-eos is walbox with --delivery exactly-once --transaction-max-interval %s (other transaction settings: walbox's defaults), on the same backlog or load as the at-least-once walbox row; its consumer reads with read_committed, like every consumer of the benchmark, so its latency includes the wait for the Kafka transaction's commit.", interval))
	}
	return n
}

func verdict(ok bool) string {
	if ok {
		return "met"
	}
	return "MISSED"
}

// relayNote names a walbox run other than the default one in the peak RSS
// summary: " (walbox-eos)".
func relayNote(relay string) string {
	if relay == walboxName || relay == "" {
		return ""
	}
	return " (" + relay + ")"
}
