package bench

import (
	"context"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestLiveScenariosSmoke runs the foreign-update and large-live scenarios,
// and the large-transaction drain, at a tiny scale against a real Postgres
// and kfake, with walbox built and run as its own process as in the
// benchmark: every event arrives, in per-aggregate order, none before its
// COMMIT, and every run carries the server's decoding statistics. At 20,000
// rows nothing exceeds logical_decoding_work_mem, so spill and stream are
// not asserted; the full-size figures come from `go run ./cmd/walbox-bench`.
func TestLiveScenariosSmoke(t *testing.T) {
	fulltest.Require(t, "builds walbox and runs three benchmark scenarios against Postgres")
	pgtest.RequireBinDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	env, err := StartEnv(ctx, EnvOptions{Broker: BrokerKfake})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	const rows = 20_000
	r := NewRunner(Config{
		Scenarios: []string{"large", "foreign-update", "large-live"}, LargeTxn: []int{rows}, ForeignRows: rows, LargeLive: []int{rows},
		Aggregates: 100, OutDir: t.TempDir(), DrainTimeout: 3 * time.Minute,
	}, env)
	res, err := r.Run(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Errors) > 0 {
		t.Fatalf("scenarios failed: %v", res.Errors)
	}
	for _, run := range res.LargeTxn.Runs {
		if run.SlotStats == nil || run.SlotStats.TotalTxns < 1 {
			t.Errorf("large transaction, %s: slot statistics %+v, want at least the one transaction decoded", run.Relay, run.SlotStats)
		}
	}
	f := res.ForeignUpdate
	if f == nil || f.UpdateSeconds <= 0 || f.EventsBefore < foreignWarm || f.EventsAfter == 0 || f.Lost != 0 || f.OrderViolations != 0 ||
		f.FirstAfterFraction <= 0 || f.SlotStats == nil || f.PeakRSSBytes <= 0 {
		t.Errorf("foreign-update = %+v", f)
	}
	if len(res.LargeLive) != 1 {
		t.Fatalf("large-live ran %d times, want 1", len(res.LargeLive))
	}
	l := res.LargeLive[0]
	if l.Received != rows || l.Lost != 0 || l.BeforeCommit != 0 || l.OrderViolations != 0 || l.LastAfterCommitMs <= 0 ||
		l.SlotStats == nil || l.SlotStats.TotalTxns < 1 || l.PeakRSSBytes <= 0 {
		t.Errorf("large-live = %+v (slot %+v)", l, l.SlotStats)
	}
}
