package retention

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// simSlots simulates the two slots for the keeper's steps: every position
// the live slot confirms is the end of a transaction that committed at that
// moment (commit time = confirmation time), as in a relay that keeps up.
type simSlots struct {
	live     *liveSim
	trailing pglogrepl.LSN
	scans    int
}

func (s *simSlots) current() pglogrepl.LSN {
	if n := len(s.live.lsn); n > 0 {
		return s.live.lsn[n-1]
	}
	return 0
}

func (s *simSlots) advance(_ context.Context, target pglogrepl.LSN) (Advanced, error) {
	a := Advanced{Before: s.trailing, Live: s.current()}
	s.trailing = max(s.trailing, min(target, a.Live))
	a.After = s.trailing
	return a, nil
}

// scan counts one change per transaction.
func (s *simSlots) scan(_ context.Context, budget int64, changes int) (scanned, error) {
	s.scans++
	sc := scanned{live: s.current()}
	sc.upto = min(s.trailing+pglogrepl.LSN(budget), sc.live)
	lsns := s.live.lsn
	for i := sort.Search(len(lsns), func(i int) bool { return lsns[i] > s.trailing }); i < len(lsns) && lsns[i] <= sc.upto; i++ {
		if len(sc.commits) == changes {
			sc.more = true
			break
		}
		if i == 0 || lsns[i] != lsns[i-1] {
			sc.commits = append(sc.commits, commitAt{at: s.live.at[i], end: lsns[i]})
		}
	}
	return sc, nil
}

// TestKeeperRestartedEveryHalfWindow restarts the keeper (a new one: an
// empty history) every half window, for the windows of cadenceWindows, at
// the real cadence with a fake clock, and checks what
// TestHistoryKeepsTheWindowAtTheRealCadence checks: from a window plus the
// bound after the start on, the trailing slot holds the window, never
// less, and at most the bound more.
//
// Regression (issue #17 item 2): the history was in memory only, so a
// restart reset it and the slot did not move for a window after it; a
// deployment restarted more often than the window never advanced. The
// keeper now advances by the commit times of the slot's own stream until
// its history covers the window.
func TestKeeperRestartedEveryHalfWindow(t *testing.T) {
	for _, w := range cadenceWindows() {
		t.Run(w.String(), func(t *testing.T) {
			t.Parallel()
			var (
				now  = t0
				live liveSim
				db   = &simSlots{live: &live}
				k    *Keeper
			)
			newKeeper := func() *Keeper {
				cc, _ := pgx.ParseConfig("postgres://u@127.0.0.1:1/db")
				k, err := New(Config{Slot: "walbox", Window: w, Publication: "walbox", Now: func() time.Time { return now }},
					cc, db.current, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
				if err != nil {
					t.Fatal(err)
				}
				k.scanChanges = 16 // small, so that a step reads the stream in pieces
				return k
			}
			k = newKeeper()
			maxGap := k.cfg.Interval + k.cfg.Interval/20
			bound := w/DefaultBuckets + 2*maxGap
			r := rand.New(rand.NewPCG(uint64(w), 2))
			restartAt := t0.Add(w / 2)
			restarts := 0
			for i := 0; now.Before(t0.Add(3 * w)); i++ {
				if !now.Before(restartAt) {
					k = newKeeper()
					restarts++
					restartAt = now.Add(w / 2)
				}
				live.tick(now, i)
				if err := k.step(context.Background(), db); err != nil {
					t.Fatal(err)
				}
				if now.Sub(t0) >= w+bound {
					lo, hi := live.atTime(now.Add(-w-bound)), live.atTime(now.Add(-w))
					if db.trailing < lo || db.trailing > hi {
						t.Fatalf("after %s (window %s, %d restarts): trailing slot at %s, want between %s (the live slot %s ago) and %s (a window ago)",
							now.Sub(t0), w, restarts, db.trailing, lo, w+bound, hi)
					}
					// What the alerts read: the slot is in place now, and
					// holds nothing older than the window plus the bound.
					if got := testutil.ToFloat64(k.lastCurrent); got != unixSeconds(now) {
						t.Fatalf("after %s: walbox_replay_slot_last_advance_timestamp_seconds %.0f, want now (%.0f)", now.Sub(t0), got, unixSeconds(now))
					}
					if held := unixSeconds(now) - testutil.ToFloat64(k.since); held > (w + bound).Seconds() {
						t.Fatalf("after %s: walbox_replay_slot_retained_since_timestamp_seconds is %.0fs ago, more than the window plus the bound (%s)", now.Sub(t0), held, w+bound)
					}
				}
				now = now.Add(k.cfg.Interval + time.Duration(r.Int64N(int64(k.cfg.Interval/20)+1)))
			}
			if restarts < 5 || db.scans == 0 {
				t.Errorf("%d restarts and %d scans of the slot's stream: the test did not test", restarts, db.scans)
			}
		})
	}
}

// TestKeeperWithoutRestartsScansOnlyAtTheStart: once the history covers
// the window, the keeper no longer reads the trailing slot's stream (the
// scan decodes WAL on the server; the history costs nothing).
func TestKeeperWithoutRestartsScansOnlyAtTheStart(t *testing.T) {
	w := 24 * time.Hour
	now := t0
	var live liveSim
	db := &simSlots{live: &live}
	cc, _ := pgx.ParseConfig("postgres://u@127.0.0.1:1/db")
	k, err := New(Config{Slot: "walbox", Window: w, Publication: "walbox", Now: func() time.Time { return now }},
		cc, db.current, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	var scansAtWindow int
	for i := 0; now.Before(t0.Add(3 * w)); i++ {
		live.tick(now, i)
		if err := k.step(context.Background(), db); err != nil {
			t.Fatal(err)
		}
		if now.Sub(t0) < w+k.hist.Step()+k.cfg.Interval { // the first bucket's sample is its last observation
			scansAtWindow = db.scans
		}
		if now.Sub(t0) > w {
			if got := testutil.ToFloat64(k.lastCurrent); got != unixSeconds(now) {
				t.Fatalf("after %s: walbox_replay_slot_last_advance_timestamp_seconds %.0f, want now (%.0f)", now.Sub(t0), got, unixSeconds(now))
			}
			bound := w/DefaultBuckets + 2*k.cfg.Interval
			if held := unixSeconds(now) - testutil.ToFloat64(k.since); held > (w + bound).Seconds() {
				t.Fatalf("after %s: walbox_replay_slot_retained_since_timestamp_seconds is %.0fs ago, more than the window plus the bound (%s)", now.Sub(t0), held, w+bound)
			}
		}
		now = now.Add(k.cfg.Interval)
	}
	if scansAtWindow == 0 || db.scans != scansAtWindow {
		t.Errorf("%d scans in the first window, %d in all: want some in the first window and none after", scansAtWindow, db.scans)
	}
}

// TestKeeperAfterALossyFailover: the live slot's history switched (the
// standby promoted lacked the last 3 s of the old primary's transactions),
// so the live slot confirms positions from the switch point on again, of
// other transactions. The keeper's history kept the old timeline's higher
// positions and ignored the new, lower ones: those became targets, and the
// trailing slot was advanced past new transactions confirmed within the
// window (to the live slot itself right after the failover), which walbox
// replay could then no longer send. With the relay's rewind
// (Config.Rewound), nothing past the switch point is a target until the
// new history's positions are a window old.
func TestKeeperAfterALossyFailover(t *testing.T) {
	for _, rewind := range []bool{true, false} {
		t.Run(map[bool]string{true: "rewound", false: "without the rewind (the old keeper)"}[rewind], func(t *testing.T) {
			const w = 10 * time.Second
			var (
				now        = t0
				live       liveSim
				db         = &simSlots{live: &live}
				rewinds    uint64
				switchLSN  pglogrepl.LSN
				failoverAt = t0.Add(3 * w)
			)
			cfg := Config{Slot: "walbox", Window: w, Now: func() time.Time { return now }}
			if rewind {
				cfg.Rewound = func() (uint64, pglogrepl.LSN) { return rewinds, switchLSN }
			}
			cc, _ := pgx.ParseConfig("postgres://u@127.0.0.1:1/db")
			k, err := New(cfg, cc, db.current, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
			if err != nil {
				t.Fatal(err)
			}
			violated := ""
			for i := 0; now.Before(failoverAt.Add(3 * w)); i++ {
				if switchLSN == 0 && !now.Before(failoverAt) {
					// The switch point: the live slot's position 3 s
					// ago. The trailing slot, synchronized to the
					// standby, is at most there.
					switchLSN = live.atTime(now.Add(-3 * time.Second))
					db.trailing = min(db.trailing, switchLSN)
					live.at, live.lsn = append(live.at, now), append(live.lsn, switchLSN)
					rewinds++
				}
				live.tick(now, i)
				if err := k.step(context.Background(), db); err != nil {
					t.Fatal(err)
				}
				if switchLSN != 0 && violated == "" {
					// Everything past the switch point was confirmed after
					// the failover: the trailing slot may hold no less than
					// what the new history confirmed a window ago.
					limit := switchLSN
					if ago := now.Add(-w); !ago.Before(failoverAt) {
						limit = max(limit, live.atTime(ago))
					}
					if db.trailing > limit {
						violated = fmt.Sprintf("%s after the failover: trailing slot at %s, past %s (the switch point %s, or the new history's position a window ago); the live slot is at %s",
							now.Sub(failoverAt), db.trailing, limit, switchLSN, db.current())
					}
				}
				now = now.Add(k.cfg.Interval)
			}
			switch {
			case rewind && violated != "":
				t.Fatal(violated)
			case !rewind && violated == "":
				t.Fatal("without the rewind the trailing slot stayed in the window: the test does not test")
			case !rewind:
				t.Log("as before the fix: " + violated)
			}
			if rewind && db.trailing <= switchLSN {
				t.Fatalf("three windows after the failover the trailing slot is still at %s (switch point %s): it does not move on the new history", db.trailing, switchLSN)
			}
		})
	}
}
