package bench

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSettleSlotStats checks the settling of pg_stat_replication_slots
// reads: on PostgreSQL 14 the view trails the walsender, so the first read
// after a run may be short; the figures count only once they stop changing.
func TestSettleSlotStats(t *testing.T) {
	seq := func(vals ...int64) func() (SlotStats, error) {
		i := 0
		return func() (SlotStats, error) {
			v := vals[min(i, len(vals)-1)]
			i++
			return SlotStats{SpillBytes: v, SpillTxns: min(v, 1)}, nil
		}
	}
	ctx := context.Background()
	t.Run("settles on the last value", func(t *testing.T) {
		got, err := settleSlotStats(ctx, seq(0, 100, 389<<20), time.Millisecond, 20*time.Millisecond, 10*time.Second)
		if err != nil || got.SpillBytes != 389<<20 || got.Unsettled {
			t.Fatalf("settleSlotStats = %+v, %v; want spill 389 MiB, settled", got, err)
		}
	})
	t.Run("waits until the figures stop growing", func(t *testing.T) {
		// The view trails decoding: it grows for 300 ms, then stays (a pause
		// of this test longer than the 150 ms window would end it early).
		start := time.Now()
		read := func() (SlotStats, error) {
			return SlotStats{SpillBytes: min(time.Since(start).Milliseconds(), 300)}, nil
		}
		got, err := settleSlotStats(ctx, read, time.Millisecond, 150*time.Millisecond, 10*time.Second)
		if err != nil || got.SpillBytes != 300 || got.Unsettled {
			t.Fatalf("settleSlotStats = %+v, %v; want the final 300, settled", got, err)
		}
	})
	t.Run("still changing at the deadline", func(t *testing.T) {
		n := int64(0)
		read := func() (SlotStats, error) { n++; return SlotStats{StreamBytes: n}, nil }
		got, err := settleSlotStats(ctx, read, time.Millisecond, time.Hour, 30*time.Millisecond)
		if err != nil || !got.Unsettled || got.StreamBytes == 0 {
			t.Fatalf("settleSlotStats = %+v, %v; want the last read, marked unsettled", got, err)
		}
	})
	t.Run("read error", func(t *testing.T) {
		boom := errors.New("boom")
		_, err := settleSlotStats(ctx, func() (SlotStats, error) { return SlotStats{}, boom }, time.Millisecond, time.Millisecond, time.Second)
		if !errors.Is(err, boom) {
			t.Fatalf("settleSlotStats error = %v, want boom", err)
		}
	})
}

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

// TestForeignFigures checks the foreign-update scenario's arithmetic on the
// shape protocol 1 gives: events committed after the UPDATE wait until the
// server has decoded all of it.
func TestForeignFigures(t *testing.T) {
	// The UPDATE is sent at 1000 ms and its commit returns at 11000 ms.
	sent := []time.Duration{ms(100), ms(500), ms(5000), ms(10995), ms(11005), ms(11015), ms(11025)}
	commit := []time.Duration{ms(105), ms(505), ms(5005), ms(11003), ms(11010), ms(11020), 0}
	recv := []time.Duration{ms(110), ms(512), ms(5030), ms(14000), ms(14001), 0, 0}
	var res ForeignUpdateResult
	foreignFigures(&res, sent, commit, recv, ms(1000), ms(11000))
	want := ForeignUpdateResult{
		EventsBefore: 2, EventsDuring: 2, EventsAfter: 1,
		FirstAfterLatencyMs: 2991, FirstAfterFraction: 0.2991, MaxAfterLatencyMs: 2991,
		MaxDuringLatencyMs: 2997, BeforeP50Ms: 5,
		Lost: 1, // the sixth; the seventh was never committed
	}
	if res.EventsBefore != want.EventsBefore || res.EventsDuring != want.EventsDuring || res.EventsAfter != want.EventsAfter ||
		res.FirstAfterLatencyMs != want.FirstAfterLatencyMs || res.MaxAfterLatencyMs != want.MaxAfterLatencyMs ||
		res.MaxDuringLatencyMs != want.MaxDuringLatencyMs || res.BeforeP50Ms != want.BeforeP50Ms || res.Lost != want.Lost {
		t.Errorf("foreignFigures =\n%+v\nwant\n%+v", res, want)
	}
	if d := res.FirstAfterFraction - want.FirstAfterFraction; d > 1e-9 || d < -1e-9 {
		t.Errorf("fraction = %v, want %v", res.FirstAfterFraction, want.FirstAfterFraction)
	}
}

func TestLiveTxnFigures(t *testing.T) {
	// COMMIT sent at 1000 ms, returned at 1010 ms; one event before the
	// COMMIT was sent (a relay producing uncommitted changes), one lost.
	recv := []time.Duration{ms(1500), ms(999), ms(1005), 0, ms(6000)}
	var res LiveTxnResult
	liveTxnFigures(&res, recv, ms(1000), ms(1010))
	if res.BeforeCommit != 1 || res.Lost != 1 || res.FirstAfterCommitMs != -11 || res.LastAfterCommitMs != 4990 {
		t.Errorf("liveTxnFigures = %+v; want 1 before COMMIT, 1 lost, first -11 ms, last 4990 ms", res)
	}
}

// TestConsumerOrderCheck checks the per-aggregate order check of the live
// scenarios: a smaller id after a larger one of the same key is counted,
// other keys and duplicates are not.
func TestConsumerOrderCheck(t *testing.T) {
	c := &latencyConsumer{firstID: 100, recvAt: make([]time.Duration, 10), lastID: map[string]int64{}}
	rec := func(key string, id int) *kgo.Record {
		return &kgo.Record{Key: []byte(key), Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(strconv.Itoa(id))}}}
	}
	for i, r := range []*kgo.Record{rec("a", 100), rec("b", 103), rec("a", 102), rec("b", 101), rec("a", 102), rec("a", 104), rec("x", 7)} {
		c.take(r, ms(i+1))
	}
	if got := c.disorder.Load(); got != 1 {
		t.Errorf("order violations = %d, want 1 (b: 101 after 103)", got)
	}
	if c.received.Load() != 5 || c.dups.Load() != 1 || c.foreign.Load() != 1 {
		t.Errorf("received %d, dups %d, foreign %d; want 5, 1, 1", c.received.Load(), c.dups.Load(), c.foreign.Load())
	}
	plain := &latencyConsumer{firstID: 100, recvAt: make([]time.Duration, 10)}
	plain.take(rec("a", 105), 1)
	plain.take(rec("a", 101), 2)
	if plain.disorder.Load() != 0 {
		t.Error("a consumer without the order check counted a violation")
	}
}

// TestStreamTables checks that every slot-based run's spill and stream
// figures are in the table, and the targets' verdicts on figures like the
// ones measured with protocol 1 and like the ones streaming must reach.
func TestStreamTables(t *testing.T) {
	spilled := &SlotStats{SpillTxns: 1, SpillCount: 40, SpillBytes: 389 << 20, TotalTxns: 1000}
	streamed := &SlotStats{StreamTxns: 1, StreamCount: 300, StreamBytes: 351 << 20, TotalTxns: 1}
	res := &Results{
		Backlog:  &BacklogResult{Runs: []DrainRun{{Relay: "walbox", Events: 1000, SlotStats: &SlotStats{TotalTxns: 10}}, {Relay: "poll-100", Events: 1000}}},
		Steady:   &SteadyResult{TargetRate: 5000, Runs: []SteadyRun{{Relay: "walbox", SlotStats: &SlotStats{TotalTxns: 7}}}},
		LargeTxn: &LargeTxnResult{Runs: []DrainRun{{Relay: "ceiling", Events: 250000, SlotStats: spilled}}},
		Payload:  &PayloadResult{Runs: []DrainRun{{Relay: "walbox", Events: 200, SlotStats: &SlotStats{}}}},
		ForeignUpdate: &ForeignUpdateResult{Rows: 3_000_000, UpdateSeconds: 17, FirstAfterLatencyMs: 5970, FirstAfterFraction: 0.351,
			liveProc: liveProc{SlotStats: spilled, PeakRSSBytes: 30 << 20}},
		LargeLive: []LiveTxnResult{{Rows: 500_000, Received: 500_000, LastAfterCommitMs: 400, liveProc: liveProc{SlotStats: streamed, PeakRSSBytes: 40 << 20}}},
	}
	rows := slotStatsRows(res)
	var names []string
	for _, r := range rows {
		names = append(names, r.run)
	}
	want := []string{
		"backlog drain, 1,000 events, walbox", "steady load, 5,000 events/s, walbox", "large transaction, 250,000 rows, ceiling",
		"large payloads, 200 rows, walbox", "foreign UPDATE, 3,000,000 rows, walbox", "large transaction live, 500,000 rows, walbox",
	}
	if strings.Join(names, "|") != strings.Join(want, "|") {
		t.Errorf("slot rows =\n%q\nwant\n%q", names, want)
	}
	var b bytes.Buffer
	PrintTable(&b, res)
	out := b.String()
	table := strings.Join(strings.Fields(out), " ")
	for _, s := range []string{
		"foreign UPDATE, 3,000,000 rows, walbox 1 40 389.0 0 0 0.0 1000",
		"large transaction live, 500,000 rows, walbox 0 0 0.0 1 300 351.0 1",
		"foreign UPDATE of 3,000,000 rows: server spill 0 389.0 MiB in 1 transactions NOT MET",
		"5970 ms after a 17.00 s UPDATE = 0.351 NOT MET",
		"500,000-row transaction: server spill 0 0 in 0 transactions met",
		"500,000-row transaction: walbox peak RSS <= 64 MiB 40.0 MiB met",
	} {
		if !strings.Contains(table, s) {
			t.Errorf("table lacks %q:\n%s", s, out)
		}
	}
}
