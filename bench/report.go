package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteJSON writes res to path, indented.
func WriteJSON(path string, res *Results) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// PrintTable writes the human summary of res.
func PrintTable(w io.Writer, res *Results) {
	mode := "default run"
	if res.Quick {
		mode = "quick run (--quick)"
	}
	fmt.Fprintf(w, "\nwalbox benchmark: %s, %d CPUs, %s, %s\n", mode, res.Machine.CPUs, res.Postgres, res.Broker)
	fmt.Fprintf(w, "total %.0f s; load average before %s, after %s (other work on the machine skews the figures)\n",
		res.DurationSeconds, res.Machine.LoadAvgStart, res.Machine.LoadAvgEnd)

	if b := res.Backlog; b != nil {
		fmt.Fprintf(w, "\n1. Backlog drain: %s events in %s transactions of %d, ~%d-byte JSON payloads, %d aggregates\n",
			thousands(b.Events), thousands(b.Txns), b.TxnSize, payloadSize, res.Settings.Aggregates)
		tw := tab(w)
		fmt.Fprintln(tw, "   relay\tdrain s\tacked s\tevents/s\tMB/s\tpeak RSS MiB\trelay CPU µs/ev\trecords/batch\tWAL B/event\tupdates/event\tPG CPU ms/1k ev\tother CPU %\t")
		for _, r := range b.Runs {
			if r.Error != "" {
				fmt.Fprintf(tw, "   %s\tfailed: %s\t\t\t\t\t\t\t\t\n", r.Relay, short(r.Error))
				continue
			}
			drain := fmt.Sprintf("%.2f", r.DrainSeconds)
			if r.Partial {
				drain = fmt.Sprintf("%.2f (stopped, %s of %s sent)", r.DrainSeconds, thousands(r.Delivered), thousands(r.Events))
			}
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%.1f\t%s\t%.1f\t%.1f\t%.0f\t%.2f\t%.1f\t%.0f\t\n", r.Relay, drain, secs(r.AckedSeconds),
				thousands(int(r.EventsPerSec)), r.MBPerSec, rssCell(r.PeakRSSBytes), r.CPUMicrosPerEvent, r.RecordsPerBatch, r.DB.WALBytesPerEvent, r.DB.TupleUpdatesPerEvent, r.DB.PGCPUMsPer1kEvents, r.OtherCPUPct)
		}
		tw.Flush()
		printComparisons(w, res, "backlog")
	}

	if s := res.Steady; s != nil {
		fmt.Fprintf(w, "\n2. Steady load: %s events/s for %.0f s, transactions of 1-10 rows; latency from commit return to consumer receipt\n",
			thousands(s.TargetRate), s.DurationSeconds)
		tw := tab(w)
		fmt.Fprintln(tw, "   relay\tevents\trate/s\tp50 ms\tp95 ms\tp99 ms\tmax ms\tlost\tdups\tpeak RSS MiB\tWAL B/event\tupdates/event\tPG CPU ms/1k ev\tother CPU %\t")
		runs := s.Runs
		if s.Baseline != nil {
			runs = append([]SteadyRun{*s.Baseline}, runs...)
		}
		for i, r := range runs {
			if r.Error != "" {
				fmt.Fprintf(tw, "   %s\tfailed: %s\t\t\t\t\t\t\t\t\t\t\t\t\n", r.Relay, short(r.Error))
				continue
			}
			lat := fmt.Sprintf("%.1f\t%.1f\t%.1f\t%.1f", r.Latency.P50Ms, r.Latency.P95Ms, r.Latency.P99Ms, r.Latency.MaxMs)
			if i == 0 && s.Baseline != nil {
				lat = "-\t-\t-\t-"
			}
			fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\t%d\t%d\t%s\t%+.0f\t%+.2f\t%+.1f\t%.0f\t\n", r.Relay, thousands(r.Events), thousands(int(r.AchievedRate)),
				lat, r.Lost, r.Duplicates, rssCell(r.PeakRSSBytes), r.DB.WALBytesPerEvent, r.DB.TupleUpdatesPerEvent, r.DB.PGCPUMsPer1kEvents, r.OtherCPUPct)
		}
		tw.Flush()
		fmt.Fprintln(w, "   (database figures of the relays are beyond the writer's own, which is the first row)")
		printComparisons(w, res, "steady")
	}

	if l := res.LargeTxn; l != nil {
		fmt.Fprintln(w, "\n3. Large transaction: one transaction, written while the relay is stopped")
		tw := tab(w)
		fmt.Fprintln(tw, "   relay\trows\twrite s\tdrain s\tevents/s\tpeak RSS MiB\trelay CPU µs/ev\tother CPU %\t")
		for _, r := range l.Runs {
			if r.Error != "" {
				fmt.Fprintf(tw, "   %s\t%s\tfailed: %s\t\t\t\t\t\n", r.Relay, thousands(r.Events), short(r.Error))
				continue
			}
			fmt.Fprintf(tw, "   %s\t%s\t%.1f\t%.2f\t%s\t%s\t%.1f\t%.0f\t\n", r.Relay, thousands(r.Events), l.LoadSeconds[r.Events],
				r.DrainSeconds, thousands(int(r.EventsPerSec)), rssCell(r.PeakRSSBytes), r.CPUMicrosPerEvent, r.OtherCPUPct)
		}
		tw.Flush()
		printComparisons(w, res, "large")
	}

	if p := res.Payload; p != nil {
		fmt.Fprintf(w, "\n4. Large payloads: %s rows of ~%s-byte payloads in transactions of %d, written while the relay is stopped\n",
			thousands(p.Rows), thousands(p.PayloadBytes), p.TxnSize)
		tw := tab(w)
		fmt.Fprintln(tw, "   relay\trows\twrite s\tdrain s\tevents/s\tMB/s\tpeak RSS MiB\trelay CPU µs/ev\tother CPU %\t")
		for _, r := range p.Runs {
			if r.Error != "" {
				fmt.Fprintf(tw, "   %s\t%s\tfailed: %s\t\t\t\t\t\t\n", r.Relay, thousands(r.Events), short(r.Error))
				continue
			}
			fmt.Fprintf(tw, "   %s\t%s\t%.1f\t%.2f\t%s\t%.1f\t%s\t%.1f\t%.0f\t\n", r.Relay, thousands(r.Events), p.LoadSeconds,
				r.DrainSeconds, thousands(int(r.EventsPerSec)), r.MBPerSec, rssCell(r.PeakRSSBytes), r.CPUMicrosPerEvent, r.OtherCPUPct)
		}
		tw.Flush()
	}

	printLive(w, res)
	printSlotStats(w, res)
	printStreamTargets(w, res)

	if len(res.PeakRSS) > 0 {
		settings := "default settings"
		if extra := append(slices.Clone(res.Settings.WalboxArgs), res.Settings.WalboxEnv...); len(extra) > 0 {
			settings = "NOT the defaults: " + strings.Join(extra, " ")
		}
		fmt.Fprintf(w, "\nwalbox peak RSS (VmHWM), every walbox process run, %s; target < %d MiB:\n", settings, rssTargetMiB)
		tw := tab(w)
		for _, f := range res.PeakRSS {
			verdict := "met"
			if mib(f.Bytes) >= rssTargetMiB {
				verdict = "ABOVE TARGET"
			}
			fmt.Fprintf(tw, "   %s\t%.1f MiB\t%s\t\n", f.Run, mib(f.Bytes), verdict)
		}
		tw.Flush()
	}

	printDebezium(w, res)

	if len(res.Errors) > 0 {
		fmt.Fprintln(w, "\nErrors:")
		for _, e := range res.Errors {
			fmt.Fprintln(w, "  -", e)
		}
	}
	fmt.Fprintln(w, "\nNotes:")
	for _, n := range res.Notes {
		fmt.Fprintln(w, "  -", n)
	}
	if res.CPUProfile != "" {
		fmt.Fprintf(w, "\nCPU profile of the walbox backlog drain: %s (go tool pprof -top %s)\n", res.CPUProfile, res.CPUProfile)
	}
	if res.SteadyCPUProfile != "" {
		fmt.Fprintf(w, "CPU profile of the walbox steady run (writer and consumer included): %s\n", res.SteadyCPUProfile)
	}
	if res.LatencyPlot != "" {
		fmt.Fprintf(w, "Latency distribution: %s\n", res.LatencyPlot)
	}
}

func printComparisons(w io.Writer, res *Results, scenario string) {
	var parts []string
	metric := ""
	for _, c := range res.Comparisons {
		if c.Scenario != scenario {
			continue
		}
		if c.Metric != metric {
			if len(parts) > 0 {
				fmt.Fprintf(w, "   walbox %s: %s\n", metric, strings.Join(parts, ", "))
			}
			metric, parts = c.Metric, nil
		}
		parts = append(parts, fmt.Sprintf("%.2fx %s", c.Ratio, c.Reference))
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "   walbox %s: %s\n", metric, strings.Join(parts, ", "))
	}
}

// rssTargetMiB is the README's memory target for walbox with default
// settings.
const rssTargetMiB = 64

// rssCell is a peak RSS in MiB, "-" where it was not measured (the
// references, and walbox run in this process).
func rssCell(b int64) string {
	if b <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f", mib(b))
}

func tab(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
}

func secs(s float64) string {
	if s < 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", s)
}

func short(s string) string {
	s = strings.ReplaceAll(s, "\n", "; ")
	if len(s) > 90 {
		return s[:90] + "..."
	}
	return s
}

// thousands formats n with comma separators.
func thousands(n int) string {
	s := strconv.Itoa(n)
	neg := strings.HasPrefix(s, "-")
	if neg {
		s = s[1:]
	}
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// compare expresses walbox's figures as ratios to every reference.
func compare(res *Results) []Comparison {
	var out []Comparison
	add := func(scenario, metric, better, ref string, wv, rv float64) {
		if rv == 0 {
			return
		}
		out = append(out, Comparison{Scenario: scenario, Metric: metric, Reference: ref, Walbox: wv, Other: rv, Ratio: wv / rv, Better: better})
	}
	if b := res.Backlog; b != nil {
		var w *DrainRun
		for i := range b.Runs {
			if b.Runs[i].Relay == walboxName && b.Runs[i].Error == "" {
				w = &b.Runs[i]
			}
		}
		if w != nil {
			for _, r := range b.Runs {
				if isReference(r.Relay) && r.Error == "" {
					add("backlog", "throughput (events/s, higher is better)", "higher", r.Relay, w.EventsPerSec, r.EventsPerSec)
				}
			}
			for _, r := range b.Runs {
				if isReference(r.Relay) && r.Error == "" {
					add("backlog", "relay CPU per event (lower is better)", "lower", r.Relay, w.CPUMicrosPerEvent, r.CPUMicrosPerEvent)
				}
			}
			for _, r := range b.Runs {
				if isReference(r.Relay) && r.Error == "" {
					add("backlog", "Postgres CPU per event (lower is better)", "lower", r.Relay, w.DB.PGCPUMsPer1kEvents, r.DB.PGCPUMsPer1kEvents)
				}
			}
		}
	}
	if s := res.Steady; s != nil {
		var w *SteadyRun
		for i := range s.Runs {
			if s.Runs[i].Relay == walboxName && s.Runs[i].Error == "" {
				w = &s.Runs[i]
			}
		}
		if w != nil {
			for _, m := range []struct {
				name string
				get  func(*SteadyRun) float64
			}{
				{"p50 latency (lower is better)", func(r *SteadyRun) float64 { return r.Latency.P50Ms }},
				{"p99 latency (lower is better)", func(r *SteadyRun) float64 { return r.Latency.P99Ms }},
			} {
				for i := range s.Runs {
					if r := &s.Runs[i]; isReference(r.Relay) && r.Error == "" {
						add("steady", m.name, "lower", r.Relay, m.get(w), m.get(r))
					}
				}
			}
		}
	}
	if l := res.LargeTxn; l != nil {
		for _, w := range l.Runs {
			if w.Relay != walboxName || w.Error != "" {
				continue
			}
			for _, r := range l.Runs {
				if r.Events == w.Events && isReference(r.Relay) && r.Error == "" {
					add("large", fmt.Sprintf("throughput on %s rows (higher is better)", thousands(w.Events)), "higher", r.Relay, w.EventsPerSec, r.EventsPerSec)
					add("large", fmt.Sprintf("relay CPU per event on %s rows (lower is better)", thousands(w.Events)), "lower", r.Relay, w.CPUMicrosPerEvent, r.CPUMicrosPerEvent)
				}
			}
		}
	}
	return out
}

// isReference reports whether relay is one walbox is compared with, not a
// walbox run itself.
func isReference(relay string) bool { return !strings.HasPrefix(relay, "walbox") }

func notes(res *Results) []string {
	n := []string{
		"Broker: " + res.Broker + ". Everything (Postgres, broker, relay, writer, consumer) shares the machine's " + strconv.Itoa(res.Machine.CPUs) + " CPUs.",
		"Postgres runs with synchronous_commit=on (a commit returns after its WAL is flushed, as in production; fsync is off, so a flush is cheap), autovacuum off and no checkpoint inside a run. Autovacuum off flatters the polling relay: the dead tuples its UPDATEs leave are never vacuumed here.",
		"Drain time runs from the relay's start to every event being delivered: for walbox, acknowledged by Kafka and the slot confirmed past the last commit (status interval 250 ms); for the poll relay, marked sent and committed; for the ceiling, acknowledged (it keeps no position worth waiting for).",
		"The ceiling decodes with walbox's decoder and produces the payload keyed by aggregate id to one topic, without routing, per-transaction ack tracking, dedup or headers beyond event_id; it confirms what it received, not what Kafka acknowledged, which a real relay must never do.",
		"walbox runs as its own process (go build ./cmd/walbox) with default settings except the topic, the status interval and --producer-linger (--walbox-linger, walbox's default unless given); its peak RSS is VmHWM from /proc/PID/status, read when the drain completed (steady load: when the last event arrived). \"walbox (in-process)\" runs only with --cpuprofile, for the profile; its memory is the benchmark's and is not reported.",
		"Relay CPU per event: for walbox, the walbox process's own CPU (/proc); for the in-process relays, the benchmark process's CPU during the drain (relay plus the drain's polling" + kfakeNote(res) + ").",
		"Other CPU % is the share of the machine's CPU capacity used by processes outside the benchmark (not Postgres, the broker, walbox or this process) during the run, from /proc/stat: the figures assume an idle machine, and runs with a high value are skewed.",
		"MB/s counts the JSON payloads as the writer wrote them; walbox and the poll relay also send the key and headers (trace_id, correlation_id, event_id, event_type).",
		"WAL per event is the growth of pg_current_wal_insert_lsn() during the run (the same bytes pg_stat_wal.wal_bytes counts, without its up-to-10 s publication delay); PG CPU is the Postgres process tree's user+system time from /proc. In the steady run both are beyond the writer's own cost, measured by the writer-only baseline.",
	}
	if res.Steady != nil {
		n = append(n, "Steady latency joins, per event id, the time the writer's INSERT returned with the time the consumer's poll returned the record; the consumer polls with default fetch settings (the broker answers a fetch as soon as any data is there).")
	}
	if res.ForeignUpdate != nil || len(res.LargeLive) > 0 || res.LargeTxn != nil {
		n = append(n, "Spill and stream are pg_stat_replication_slots of the relay's slot, reset with pg_stat_reset_replication_slot at the run's start and read once they stopped changing: spill is the walsender writing a transaction larger than logical_decoding_work_mem ("+pgSettings["logical_decoding_work_mem"]+") to the server's disk, stream is sending it in progress (protocol 2+, streaming on).")
	}
	if res.ForeignUpdate != nil || len(res.LargeLive) > 0 {
		n = append(n, "The foreign-update and large-live scenarios run walbox while the work happens: the foreign table is written before walbox's slot exists, then updated in one transaction while one outbox event commits every "+tickInterval.String()+" on one connection; the large-live transaction is one COPY. Their consumer also checks per-aggregate order (ids of an aggregate must arrive ascending).")
	}
	if res.Payload != nil {
		n = append(n, "Large payloads: random hex inside the JSON, so neither TOAST nor the producer's compression shrinks them; one record per payload, each close to the default producer batch limit.")
	}
	return n
}

func kfakeNote(res *Results) string {
	if strings.HasPrefix(res.Broker, "kfake") {
		return ", and the in-process kfake broker's"
	}
	return ""
}
