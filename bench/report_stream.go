package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// foreignFractionTarget is the target for the foreign-update scenario: the
// first event committed after a foreign bulk UPDATE arrives within this
// share of the UPDATE's own duration.
const foreignFractionTarget = 0.1

// slotRow is one run's server statistics, named for the tables.
type slotRow struct {
	run string
	s   *SlotStats
}

// slotStatsRows lists the server's spill and stream figures of every run
// of a slot-based relay in res, in scenario order.
func slotStatsRows(res *Results) []slotRow {
	var out []slotRow
	add := func(run string, s *SlotStats) {
		if s != nil {
			out = append(out, slotRow{run, s})
		}
	}
	if b := res.Backlog; b != nil {
		for _, r := range b.Runs {
			add(fmt.Sprintf("backlog drain, %s events, %s", thousands(r.Events), r.Relay), r.SlotStats)
		}
	}
	if s := res.Steady; s != nil {
		for _, r := range s.Runs {
			add(fmt.Sprintf("steady load, %s events/s, %s", thousands(steadyRate(s, r)), r.Relay), r.SlotStats)
		}
	}
	if l := res.LargeTxn; l != nil {
		for _, r := range l.Runs {
			add(fmt.Sprintf("large transaction, %s rows, %s", thousands(r.Events), r.Relay), r.SlotStats)
		}
	}
	if p := res.Payload; p != nil {
		for _, r := range p.Runs {
			add(fmt.Sprintf("large payloads, %s rows, %s", thousands(r.Events), r.Relay), r.SlotStats)
		}
	}
	if f := res.ForeignUpdate; f != nil {
		add(fmt.Sprintf("foreign UPDATE, %s rows, walbox", thousands(f.Rows)), f.SlotStats)
	}
	for _, l := range res.LargeLive {
		add(fmt.Sprintf("large transaction live, %s rows, walbox", thousands(l.Rows)), l.SlotStats)
	}
	return out
}

// printLive writes the live scenarios' tables.
func printLive(w io.Writer, res *Results) {
	if f := res.ForeignUpdate; f != nil {
		fmt.Fprintf(w, "\n5. Foreign bulk UPDATE: UPDATE of every row of a %s-row table outside the publication, one transaction, while one outbox event commits every %s; latency from commit return to arrival\n",
			thousands(f.Rows), tickInterval)
		tw := tab(w)
		fmt.Fprintln(tw, "   relay\tUPDATE s\tfirst after ms\tshare of UPDATE\tmax after ms\tmax during ms\tp50 before ms\tevents b/d/a\tlost\tdups\tout of order\tspill MiB\tstream MiB\tpeak RSS MiB\tother CPU %\t")
		if f.Error != "" {
			fmt.Fprintf(tw, "   walbox\tfailed: %s\t\t\t\t\t\t\t\t\t\t\t\t\t\t\n", short(f.Error))
		} else {
			fmt.Fprintf(tw, "   walbox\t%.2f\t%.0f\t%.3f\t%.0f\t%.0f\t%.1f\t%d/%d/%d\t%d\t%d\t%d\t%s\t%s\t%s\t%.0f\t\n",
				f.UpdateSeconds, f.FirstAfterLatencyMs, f.FirstAfterFraction, f.MaxAfterLatencyMs, f.MaxDuringLatencyMs, f.BeforeP50Ms,
				f.EventsBefore, f.EventsDuring, f.EventsAfter, f.Lost, f.Duplicates, f.OrderViolations,
				slotMiB(f.SlotStats, false), slotMiB(f.SlotStats, true), rssCell(f.PeakRSSBytes), f.OtherCPUPct)
		}
		tw.Flush()
		fmt.Fprintln(w, "   (\"first after\": the first event whose INSERT was sent after the UPDATE's commit returned; events b/d/a: committed before, during and after the UPDATE)")
	}
	if len(res.LargeLive) > 0 {
		fmt.Fprintln(w, "\n6. Large transaction written live: one outbox transaction (COPY) while walbox streams; times from its commit returning")
		tw := tab(w)
		fmt.Fprintln(tw, "   relay\trows\twrite s\tfirst event ms\tlast event ms\treceived\tlost\tdups\tout of order\tbefore COMMIT\tspill MiB\tstream MiB\tpeak RSS MiB\trelay CPU s\tother CPU %\t")
		for _, l := range res.LargeLive {
			if l.Error != "" && l.Received == 0 {
				fmt.Fprintf(tw, "   walbox\t%s\tfailed: %s\t\t\t\t\t\t\t\t\t\t\t\t\t\n", thousands(l.Rows), short(l.Error))
				continue
			}
			fmt.Fprintf(tw, "   walbox\t%s\t%.1f\t%.0f\t%.0f\t%s\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t%.2f\t%.0f\t\n", thousands(l.Rows), l.WriteSeconds,
				l.FirstAfterCommitMs, l.LastAfterCommitMs, thousands(l.Received), l.Lost, l.Duplicates, l.OrderViolations, l.BeforeCommit,
				slotMiB(l.SlotStats, false), slotMiB(l.SlotStats, true), rssCell(l.PeakRSSBytes), l.CPUSeconds, l.OtherCPUPct)
		}
		tw.Flush()
	}
}

// printSlotStats writes the server's spill and stream figures of every
// slot-based run.
func printSlotStats(w io.Writer, res *Results) {
	rows := slotStatsRows(res)
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nServer-side logical decoding per run (pg_stat_replication_slots of the relay's slot, reset at the run's start):")
	tw := tab(w)
	fmt.Fprintln(tw, "   run\tspill txns\tspill count\tspill MiB\tstream txns\tstream count\tstream MiB\ttotal txns\ttotal MiB\t")
	for _, r := range rows {
		note := ""
		if r.s.Unsettled {
			note = " (still changing)"
		}
		fmt.Fprintf(tw, "   %s%s\t%d\t%d\t%.1f\t%d\t%d\t%.1f\t%d\t%.1f\t\n", r.run, note, r.s.SpillTxns, r.s.SpillCount, mib(r.s.SpillBytes),
			r.s.StreamTxns, r.s.StreamCount, mib(r.s.StreamBytes), r.s.TotalTxns, mib(r.s.TotalBytes))
	}
	tw.Flush()
}

// printStreamTargets writes the large-transaction targets against what
// the live scenarios measured.
func printStreamTargets(w io.Writer, res *Results) {
	f := res.ForeignUpdate
	if (f == nil || f.Error != "") && len(res.LargeLive) == 0 {
		return
	}
	fmt.Fprintln(w, "\nLarge-transaction targets:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	line := func(target, measured string, ok bool) {
		verdict := "met"
		if !ok {
			verdict = "NOT MET"
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t\n", target, measured, verdict)
	}
	if f != nil && f.Error == "" && f.SlotStats != nil {
		line(fmt.Sprintf("foreign UPDATE of %s rows: server spill 0", thousands(f.Rows)),
			fmt.Sprintf("%s in %d transactions", mibCell(f.SlotStats.SpillBytes), f.SlotStats.SpillTxns), f.SlotStats.SpillBytes == 0)
		line(fmt.Sprintf("foreign UPDATE: next events within %.1f of its duration", foreignFractionTarget),
			fmt.Sprintf("%.0f ms after a %.2f s UPDATE = %.3f", f.FirstAfterLatencyMs, f.UpdateSeconds, f.FirstAfterFraction), f.FirstAfterFraction < foreignFractionTarget)
	}
	for _, l := range res.LargeLive {
		if l.SlotStats == nil {
			continue
		}
		line(fmt.Sprintf("%s-row transaction: server spill 0", thousands(l.Rows)),
			fmt.Sprintf("%s in %d transactions", mibCell(l.SlotStats.SpillBytes), l.SlotStats.SpillTxns), l.SlotStats.SpillBytes == 0)
		line(fmt.Sprintf("%s-row transaction: complete, in order, nothing before COMMIT", thousands(l.Rows)),
			fmt.Sprintf("%s of %s, %d lost, %d out of order, %d before COMMIT; last %.0f ms after COMMIT", thousands(l.Received), thousands(l.Rows), l.Lost, l.OrderViolations, l.BeforeCommit, l.LastAfterCommitMs),
			l.Received == l.Rows && l.Lost == 0 && l.OrderViolations == 0 && l.BeforeCommit == 0)
		if l.PeakRSSBytes > 0 {
			line(fmt.Sprintf("%s-row transaction: walbox peak RSS <= %d MiB", thousands(l.Rows), rssTargetMiB),
				fmt.Sprintf("%.1f MiB", mib(l.PeakRSSBytes)), mib(l.PeakRSSBytes) <= rssTargetMiB)
		}
	}
	tw.Flush()
}

// slotMiB is the spill (or stream) bytes of s in MiB, "-" without s.
func slotMiB(s *SlotStats, stream bool) string {
	if s == nil {
		return "-"
	}
	b := s.SpillBytes
	if stream {
		b = s.StreamBytes
	}
	return fmt.Sprintf("%.1f", mib(b))
}
