package bench

import (
	"context"
	"fmt"
	"path/filepath"
)

// largeTxn runs the large-transaction scenario for each size: one
// transaction of that many rows, written while no relay runs, drained by
// walbox as its own process (for its peak RSS) and by the ceiling, each
// from a slot created before the write.
func (r *Runner) largeTxn(ctx context.Context, bin string) {
	c := r.cfg
	res := &LargeTxnResult{LoadSeconds: map[int]float64{}}
	r.res.LargeTxn = res
	for _, size := range c.LargeTxn {
		if ctx.Err() != nil {
			return
		}
		if err := r.env.ResetOutbox(ctx); err != nil {
			r.fail("large", err)
			return
		}
		for _, slot := range []string{"bench_walbox", "bench_ceiling"} {
			if _, err := r.env.CreateSlot(ctx, slot); err != nil {
				r.fail("large", err)
				return
			}
		}
		r.progress("large:   writing one transaction of %d rows", size)
		lr, err := r.env.Load(ctx, r.ids(size), 1, size, 1, c.Aggregates)
		if err != nil {
			r.fail("large", err)
			return
		}
		res.LoadSeconds[size] = lr.Duration.Seconds()
		target, err := r.env.currentLSN(ctx)
		if err != nil {
			r.fail("large", err)
			return
		}
		logPath := filepath.Join(c.OutDir, fmt.Sprintf("walbox-large-%d.log", size))
		runs := []Relay{
			r.env.NewWalboxProcess(bin, "bench_walbox", r.prefix("large", "walbox"), c.WalboxLinger, logPath),
			r.env.NewCeiling("bench_ceiling", r.prefix("large", "ceiling")),
		}
		for _, rel := range runs {
			run := r.drain(ctx, rel, size, target, lr.PayloadBytes, 0, nil, nil)
			if run.Error != "" {
				r.fail(fmt.Sprintf("large %d %s", size, run.Relay), fmt.Errorf("%s", run.Error))
			} else {
				r.progress("large:   %-16s %8d rows drained in %6.2fs (%.0f events/s)%s (other processes: %.0f%% CPU)",
					run.Relay, size, run.DrainSeconds, run.EventsPerSec, rssNote(run.PeakRSSBytes), run.OtherCPUPct)
			}
			res.Runs = append(res.Runs, run)
		}
	}
}
