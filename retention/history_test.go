package retention

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

var t0 = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func TestHistoryTarget(t *testing.T) {
	type obs struct {
		after time.Duration
		lsn   pglogrepl.LSN
	}
	tests := []struct {
		name   string
		obs    []obs
		at     time.Duration // when Target is asked
		want   pglogrepl.LSN
		wantOK bool
	}{
		{name: "empty", at: time.Hour},
		{name: "nothing old enough yet (just after a start)", obs: []obs{{0, 100}, {30 * time.Minute, 200}}, at: 59 * time.Minute},
		{name: "exactly the window", obs: []obs{{0, 100}, {30 * time.Minute, 200}}, at: time.Hour, want: 100, wantOK: true},
		{name: "newest old enough", obs: []obs{{0, 100}, {10 * time.Minute, 150}, {30 * time.Minute, 200}}, at: 75 * time.Minute, want: 150, wantOK: true},
		{name: "all old enough", obs: []obs{{0, 100}, {10 * time.Minute, 150}}, at: 5 * time.Hour, want: 150, wantOK: true},
		// Never backwards: a lower position (a restarted relay that has not
		// confirmed yet, a bug) is not recorded.
		{name: "lower position ignored", obs: []obs{{0, 100}, {10 * time.Minute, 50}, {20 * time.Minute, 120}}, at: 70 * time.Minute, want: 100, wantOK: true},
		{name: "equal position ignored", obs: []obs{{0, 100}, {10 * time.Minute, 100}}, at: 65 * time.Minute, want: 100, wantOK: true},
		// A clock step backwards does not date a position earlier than it was.
		{name: "clock backwards ignored", obs: []obs{{10 * time.Minute, 100}, {0, 200}}, at: 65 * time.Minute, wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHistory(time.Hour, 0)
			for _, o := range tt.obs {
				h.Observe(t0.Add(o.after), o.lsn)
			}
			got, _, ok := h.Target(t0.Add(tt.at))
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("Target = %s, %t; want %s, %t", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

// TestHistoryInvariants observes a position every 10ms for three windows,
// with a few backward steps, and checks at every step: bounded, the target
// never goes backwards, was confirmed at least the window before, and is at
// most a bucket (plus one observation) older than an exact history's.
func TestHistoryInvariants(t *testing.T) {
	const (
		window  = time.Minute
		buckets = 16
		tick    = 10 * time.Millisecond
	)
	h := NewHistory(window, buckets)
	confirmedAt := map[pglogrepl.LSN]time.Time{}
	var (
		lsn, last pglogrepl.LSN
		exact     []pglogrepl.LSN // position at each tick
	)
	for i := 0; i < int(3*window/tick); i++ {
		now := t0.Add(time.Duration(i) * tick)
		if i%97 == 0 && lsn > 10 {
			h.Observe(now, lsn-10) // backwards: ignored
		}
		lsn += pglogrepl.LSN(1 + i%7)
		if _, ok := confirmedAt[lsn]; !ok {
			confirmedAt[lsn] = now
		}
		h.Observe(now, lsn)
		exact = append(exact, lsn)
		if n := h.Len(); n > buckets+3 {
			t.Fatalf("tick %d: %d samples, want at most %d", i, n, buckets+3)
		}
		got, _, ok := h.Target(now)
		if !ok {
			if now.Sub(t0) >= window+window/buckets+tick {
				t.Fatalf("tick %d (%s): no target", i, now.Sub(t0))
			}
			continue
		}
		if got < last {
			t.Fatalf("tick %d: target went backwards from %s to %s", i, last, got)
		}
		last = got
		if at := confirmedAt[got]; now.Sub(at) < window {
			t.Fatalf("tick %d: target %s confirmed %s ago, less than the window", i, got, now.Sub(at))
		}
		ideal := exact[i-int(window/tick)]
		if back := i - int((window+window/buckets)/tick) - 1; back >= 0 && got < exact[back] {
			t.Fatalf("tick %d: target %s lags more than a bucket behind the ideal %s", i, got, ideal)
		}
	}
}
