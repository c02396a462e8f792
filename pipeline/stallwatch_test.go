package pipeline

import (
	"testing"
	"time"
)

// TestCheckStall: the session is given up only when the walsender was seen
// blocked writing for stallAfter of the time the loop read and received
// nothing, on a fresh sample.
func TestCheckStall(t *testing.T) {
	now := time.Now()
	for _, c := range []struct {
		name                              string
		writingSince, lastSample, lastRcv time.Duration // ago; writingSince < 0: not writing
		stalled                           bool
	}{
		{"writing and silent", 8 * time.Second, 0, 8 * time.Second, true},
		{"not writing", -1, 0, time.Minute, false},
		{"received recently", time.Minute, 0, time.Second, false},
		{"writing only lately", 2 * time.Second, 0, time.Minute, false},
		{"stale sample", time.Minute, 10 * time.Second, time.Minute, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			tl := newTestLoop(t, Config{}, &fakeProducer{})
			l := tl.newSession()
			l.stall = &stallWatch{}
			if c.writingSince >= 0 {
				l.stall.writingSince.Store(now.Add(-c.writingSince).UnixNano())
			}
			l.stall.lastSample.Store(now.Add(-c.lastSample).UnixNano())
			l.lastReceive = now.Add(-c.lastRcv)
			err := l.checkStall()
			if (err != nil) != c.stalled {
				t.Fatalf("checkStall = %v, want stalled %v", err, c.stalled)
			}
			if err != nil && !IsRetryable(err) {
				t.Errorf("a stall is not retryable: %v", err)
			}
		})
	}
}
