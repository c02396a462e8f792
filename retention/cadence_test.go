package retention

import (
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

// cadenceWindows are the windows the cadence tests cover: one minute to 30
// days, the ones issue #17 computed by hand, and random ones.
func cadenceWindows() []time.Duration {
	ws := []time.Duration{
		time.Minute, 5 * time.Minute, time.Hour, 4 * time.Hour, 4*time.Hour + 18*time.Minute, 5 * time.Hour,
		8 * time.Hour, 12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour, 30 * 24 * time.Hour,
	}
	r := rand.New(rand.NewPCG(17, 17))
	for range 8 {
		ws = append(ws, time.Minute+time.Duration(r.Int64N(int64(30*24*time.Hour-time.Minute))))
	}
	return ws
}

// liveSim is the live slot as the keeper sees it: a position that grows at
// most ticks, pausing now and then (a quiet outbox), recorded so that its
// value at any past time is known.
type liveSim struct {
	at  []time.Time
	lsn []pglogrepl.LSN
}

func (l *liveSim) tick(now time.Time, i int) pglogrepl.LSN {
	lsn := pglogrepl.LSN(0x1000000)
	if n := len(l.lsn); n > 0 {
		lsn = l.lsn[n-1]
	}
	if (i/50)%4 != 3 { // every fourth stretch of 50 ticks is quiet
		lsn += pglogrepl.LSN(100 + i%13)
	}
	l.at, l.lsn = append(l.at, now), append(l.lsn, lsn)
	return lsn
}

// atTime returns the live slot's position at t (0 before the first tick).
func (l *liveSim) atTime(t time.Time) pglogrepl.LSN {
	i := sort.Search(len(l.at), func(i int) bool { return l.at[i].After(t) })
	if i == 0 {
		return 0
	}
	return l.lsn[i-1]
}

// TestHistoryKeepsTheWindowAtTheRealCadence observes the live slot at the
// keeper's real cadence (Config's default interval, plus up to 5% for the
// step itself) for three windows, for every window of cadenceWindows, and
// advances a simulated trailing slot as the keeper does. From one window
// plus the bound after the start, the trailing slot must always hold the
// window: at or before the live slot's position a window ago, and at or
// past its position the window plus the bound ago, the bound being
// window/256 plus two gaps between observations (what docs/replay.md
// promises).
//
// Regression (issue #17): the History merged observations closer than a
// bucket to the sample before the newest and dropped the oldest samples at
// 259; at a one-minute cadence, for windows from about 4.3 hours to 4
// weeks, no sample was ever a window old and the slot never moved.
func TestHistoryKeepsTheWindowAtTheRealCadence(t *testing.T) {
	for _, w := range cadenceWindows() {
		t.Run(w.String(), func(t *testing.T) {
			t.Parallel()
			cfg := Config{Window: w}
			cfg.setDefaults()
			h := NewHistory(w, 0)
			maxGap := cfg.Interval + cfg.Interval/20
			bound := w/DefaultBuckets + 2*maxGap
			r := rand.New(rand.NewPCG(uint64(w), 1))
			var (
				live     liveSim
				trailing pglogrepl.LSN
				maxLen   int
			)
			now := t0
			for i := 0; now.Before(t0.Add(3 * w)); i++ {
				lsn := live.tick(now, i)
				h.Observe(now, lsn)
				if target, _, ok := h.Target(now); ok {
					trailing = max(trailing, min(target, lsn))
				}
				maxLen = max(maxLen, h.Len())
				if now.Sub(t0) >= w+bound {
					lo, hi := live.atTime(now.Add(-w-bound)), live.atTime(now.Add(-w))
					if trailing < lo || trailing > hi {
						t.Fatalf("after %s (window %s, interval %s): trailing slot at %s, want between %s (the live slot %s ago) and %s (a window ago)",
							now.Sub(t0), w, cfg.Interval, trailing, lo, w+bound, hi)
					}
				}
				now = now.Add(cfg.Interval + time.Duration(r.Int64N(int64(cfg.Interval/20)+1)))
			}
			if maxLen > DefaultBuckets+2 {
				t.Errorf("the history held %d samples, want at most %d", maxLen, DefaultBuckets+2)
			}
			if trailing == 0 {
				t.Error("the trailing slot never moved")
			}
		})
	}
}
