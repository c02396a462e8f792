package retention

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// sample says that the live slot's confirmed position was lsn from at
// (the first observation of lsn) to seen (the last one).
type sample struct {
	at, seen time.Time
	lsn      pglogrepl.LSN
}

// History remembers when walbox confirmed which position, coarsely enough
// to stay bounded. Time is cut into buckets of window/buckets, aligned on
// the Unix epoch, and a bucket keeps one sample: the newest position first
// observed in it. Samples older than the window are dropped except the
// newest of them (the target). So it holds at most buckets+2 samples
// whatever the observation cadence, and the target it returns was first
// observed at least the window ago and at most the window plus one bucket
// plus the gap between two observations ago. Safe for concurrent use.
//
// There is no cap that drops the oldest samples: the bucket rule bounds
// them. (Issue #17: an earlier rule merged observations closer than a
// bucket to the sample before the newest and capped the samples at
// buckets+3; with the keeper's one-minute cadence and windows from about
// 4.3 hours to 4 weeks the samples ended up 300 s apart, the cap dropped
// them before any was a window old, and Target never returned a position.)
type History struct {
	window time.Duration
	step   time.Duration

	mu      sync.Mutex
	samples []sample // ascending in time and in lsn
}

// DefaultBuckets is the resolution of a History: a target is at most
// window/DefaultBuckets (plus the observation cadence) older than the
// window.
const DefaultBuckets = 256

// NewHistory returns an empty history for window (> 0) with the given
// resolution (buckets > 0; DefaultBuckets when 0).
func NewHistory(window time.Duration, buckets int) *History {
	if buckets <= 0 {
		buckets = DefaultBuckets
	}
	return &History{window: window, step: max(window/time.Duration(buckets), 1)}
}

// Step returns the width of a bucket: window/buckets.
func (h *History) Step() time.Duration { return h.step }

func (h *History) bucket(t time.Time) int64 { return t.UnixNano() / int64(h.step) }

// Observe records that lsn was confirmed at now. A position below the
// newest one recorded is ignored (positions only grow), as is a time before
// the newest observation (a clock step backwards); the newest position
// observed again only extends its sample's seen time.
func (h *History) Observe(now time.Time, lsn pglogrepl.LSN) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.samples)
	if n > 0 {
		last := &h.samples[n-1]
		if lsn < last.lsn || now.Before(last.seen) {
			return
		}
		if lsn == last.lsn {
			last.seen = now
			return
		}
		// A newer position in the newest sample's bucket replaces it:
		// that sample is less than a bucket old, so it is not the
		// target (which is at least a window old).
		if h.bucket(now) == h.bucket(last.at) {
			*last = sample{at: now, seen: now, lsn: lsn}
			return
		}
	}
	h.samples = append(h.samples, sample{at: now, seen: now, lsn: lsn})
	h.prune(now)
}

// Rewind forgets every position after lsn: the live slot's history
// switched (a failover that lost the old primary's last transactions,
// another cluster), and from lsn on the same LSNs are other transactions,
// confirmed only from now on. Observe, which ignores positions below the
// newest one, then records the new history's positions from lsn on; without
// this, the old history's higher positions became targets and the
// trailing slot was advanced past new transactions confirmed within the
// window (to the live slot, at most).
func (h *History) Rewind(lsn pglogrepl.LSN) {
	h.mu.Lock()
	defer h.mu.Unlock()
	i := len(h.samples)
	for i > 0 && h.samples[i-1].lsn > lsn {
		i--
	}
	h.samples = h.samples[:i]
}

// prune drops the samples older than the window except the newest of them
// (the current target).
func (h *History) prune(now time.Time) {
	cut := now.Add(-h.window)
	i := 0
	for i+1 < len(h.samples) && !h.samples[i+1].at.After(cut) {
		i++
	}
	if i > 0 {
		h.samples = append(h.samples[:0], h.samples[i:]...)
	}
}

// Target returns the newest position first confirmed at least the window
// before now, with the last time it was seen as the confirmed position
// (everything after it was confirmed later), and false when no recorded
// position is that old (less than a window since the first observation).
func (h *History) Target(now time.Time) (lsn pglogrepl.LSN, seen time.Time, ok bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prune(now)
	cut := now.Add(-h.window)
	for _, s := range h.samples {
		if s.at.After(cut) {
			break
		}
		lsn, seen, ok = s.lsn, s.seen, true
	}
	return lsn, seen, ok
}

// Len returns how many samples are held; for tests and metrics.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.samples)
}
