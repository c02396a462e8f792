package retention

import (
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
)

// sample says that lsn had been confirmed by at.
type sample struct {
	at  time.Time
	lsn pglogrepl.LSN
}

// History remembers when walbox confirmed which position, coarsely enough
// to stay bounded: samples closer together than window/buckets are merged
// (the newer position and its time replace the newest sample), and samples
// older than the window are dropped except the newest of them. It therefore
// holds at most buckets+3 samples, and Target is at most window/buckets
// more conservative than an exact history. Safe for concurrent use.
type History struct {
	window time.Duration
	step   time.Duration
	max    int

	mu      sync.Mutex
	samples []sample // ascending in time and in lsn
}

// DefaultBuckets is the resolution of a History: the trailing slot holds
// between window and window + window/DefaultBuckets.
const DefaultBuckets = 256

// NewHistory returns an empty history for window (> 0) with the given
// resolution (buckets > 0; DefaultBuckets when 0).
func NewHistory(window time.Duration, buckets int) *History {
	if buckets <= 0 {
		buckets = DefaultBuckets
	}
	return &History{window: window, step: window / time.Duration(buckets), max: buckets + 3}
}

// Observe records that lsn was confirmed by now. A position not beyond the
// newest one recorded is ignored (positions only grow), as is a time before
// the newest sample's (a clock step backwards).
func (h *History) Observe(now time.Time, lsn pglogrepl.LSN) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.samples)
	if n > 0 {
		last := h.samples[n-1]
		if lsn <= last.lsn || now.Before(last.at) {
			return
		}
		// Merge into the newest sample when it is recent, unless it is
		// the only one old enough to be a target later (the first).
		if n > 1 && now.Sub(h.samples[n-2].at) < h.step {
			h.samples[n-1] = sample{at: now, lsn: lsn}
			return
		}
	}
	h.samples = append(h.samples, sample{at: now, lsn: lsn})
	h.prune(now)
}

// prune drops the samples older than the window except the newest of them
// (the current target), then, if still over the bound, the oldest ones.
func (h *History) prune(now time.Time) {
	cut := now.Add(-h.window)
	i := 0
	for i+1 < len(h.samples) && !h.samples[i+1].at.After(cut) {
		i++
	}
	if over := len(h.samples) - i - h.max; over > 0 {
		i += over
	}
	if i > 0 {
		h.samples = append(h.samples[:0], h.samples[i:]...)
	}
}

// Target returns the newest position confirmed at least the window before
// now, and false when no recorded position is that old (just after a start).
func (h *History) Target(now time.Time) (pglogrepl.LSN, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.prune(now)
	cut := now.Add(-h.window)
	var (
		lsn pglogrepl.LSN
		ok  bool
	)
	for _, s := range h.samples {
		if s.at.After(cut) {
			break
		}
		lsn, ok = s.lsn, true
	}
	return lsn, ok
}

// Len returns how many samples are held; for tests and metrics.
func (h *History) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.samples)
}
