package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// DebeziumResult sets walbox's figures against Debezium's from the same
// run (Reference "debezium", Ratio walbox/Debezium), with how Debezium was
// set up.
type DebeziumResult struct {
	Settings DebeziumSettings `json:"settings"`
	Rows     []Comparison     `json:"rows"`
	Notes    []string         `json:"notes"`
}

// debeziumSummary returns walbox against Debezium for the runs of both
// that succeeded, nil without --with-debezium.
func (r *Runner) debeziumSummary() *DebeziumResult {
	if !r.cfg.WithDebezium {
		return nil
	}
	connector, worker := debeziumTuning()
	tuning := maps.Clone(connector)
	maps.Copy(tuning, worker)
	out := &DebeziumResult{Settings: DebeziumSettings{
		Tuning:  tuning,
		JVMArgs: debeziumJVMArgs,
		Jars:    "Kafka Connect standalone 4.3.1 with debezium-connector-postgres 3.6.1.Final (e2e/debezium/pom.xml)",
	}}
	add := func(metric, better string, w, d float64) {
		if w <= 0 || d <= 0 {
			return
		}
		scenario, _, _ := strings.Cut(metric, " ")
		out.Rows = append(out.Rows, Comparison{Scenario: scenario, Metric: metric, Reference: debeziumName, Walbox: w, Other: d, Ratio: w / d, Better: better})
	}
	if b := r.res.Backlog; b != nil {
		w, d := findDrain(b.Runs, walboxName), findDrain(b.Runs, debeziumName)
		if w != nil && d != nil {
			n := thousands(b.Events)
			add("backlog drain of "+n+" events, events/s", "higher", w.EventsPerSec, d.EventsPerSec)
			// µs per event is CPU-seconds per million events.
			add("backlog drain, relay CPU-seconds per million events", "lower", w.CPUMicrosPerEvent, d.CPUMicrosPerEvent)
			add("backlog drain, peak RSS MiB", "lower", mib(w.PeakRSSBytes), mib(d.PeakRSSBytes))
		}
	}
	if s := r.res.Steady; s != nil {
		w, d := findSteady(s.Runs, walboxName), findSteady(s.Runs, debeziumName)
		if w != nil && d != nil {
			rate := thousands(s.TargetRate)
			add("steady "+rate+" events/s, p50 latency ms", "lower", w.Latency.P50Ms, d.Latency.P50Ms)
			add("steady "+rate+" events/s, p99 latency ms", "lower", w.Latency.P99Ms, d.Latency.P99Ms)
			add("steady, relay CPU-seconds per million events", "lower", perMillion(w), perMillion(d))
			add("steady, peak RSS MiB", "lower", mib(w.PeakRSSBytes), mib(d.PeakRSSBytes))
		}
	}
	out.Notes = []string{
		"Both relays read the same Postgres through their own slot on the same publication and write to the same broker, one at a time; walbox runs with its defaults (producer linger 5 ms, batches up to 1,000,012 bytes, snappy), Debezium with the tuning above.",
		"Debezium's drain clock and CPU start when its task is RUNNING (the JVM's start-up, a few seconds and CPU-seconds, is left out); it ends when the broker has acknowledged every event (sum of the topics' high watermarks), since Debezium confirms the slot only at its offset flush. walbox's ends later, when its slot is confirmed past the last commit.",
		"Debezium's steady run has a " + debeziumWarmup.String() + " warm-up (walbox's: " + warmup.String() + ") so that its JIT has compiled the hot paths; its values are StringConverter bytes of the jsonb payload, and the event id goes into an event_id header (table.fields.additional.placement) for the latency join.",
		"Peak RSS is VmHWM of the walbox process and of the Connect JVM (the heap is capped at 1 GiB; a JVM takes what it is allowed).",
	}
	return out
}

func findDrain(runs []DrainRun, relay string) *DrainRun {
	for i := range runs {
		if runs[i].Relay == relay && runs[i].Error == "" && !runs[i].Partial {
			return &runs[i]
		}
	}
	return nil
}

func findSteady(runs []SteadyRun, relay string) *SteadyRun {
	for i := range runs {
		if runs[i].Relay == relay && runs[i].Error == "" {
			return &runs[i]
		}
	}
	return nil
}

func perMillion(r *SteadyRun) float64 {
	if r.Events == 0 {
		return 0
	}
	return r.CPUSeconds * 1e6 / float64(r.Events)
}

// printDebezium writes the walbox-against-Debezium table, if any.
func printDebezium(w io.Writer, res *Results) {
	d := res.Debezium
	if d == nil {
		return
	}
	fmt.Fprintf(w, "\nwalbox against Debezium, same run (%s)\n", d.Settings.Jars)
	tw := tab(w)
	fmt.Fprintln(tw, "   figure\twalbox\tDebezium\twalbox/Debezium\tbetter\t")
	for _, r := range d.Rows {
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%.3f\t%s\t\n", r.Metric, figure(r.Walbox), figure(r.Other), r.Ratio, r.Better)
	}
	tw.Flush()
	if len(d.Rows) == 0 {
		fmt.Fprintln(w, "   (no figures: a run of walbox or Debezium failed, see Errors)")
	}
	var set []string
	for _, k := range slices.Sorted(maps.Keys(d.Settings.Tuning)) {
		set = append(set, k+"="+d.Settings.Tuning[k])
	}
	fmt.Fprintf(w, "   Debezium set up with: %s\n", strings.Join(set, ", "))
	fmt.Fprintf(w, "   Connect JVM: %s\n", strings.Join(d.Settings.JVMArgs, " "))
	for _, n := range d.Notes {
		fmt.Fprintln(w, "   -", n)
	}
}

// figure prints a value with the precision its size deserves.
func figure(v float64) string {
	switch {
	case v >= 1000:
		return thousands(int(v + 0.5))
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}
