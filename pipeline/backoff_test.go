package pipeline

import (
	"testing"
	"time"
)

func TestBackoffStaysWithinTheCappedExponential(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 2 * time.Second
	tests := []struct {
		attempt int
		ceiling time.Duration // the un-jittered delay
	}{
		{0, 100 * time.Millisecond},
		{1, 200 * time.Millisecond},
		{3, 800 * time.Millisecond},
		{5, 2 * time.Second}, // 3.2s capped
		{60, 2 * time.Second},
	}
	for _, tt := range tests {
		for i := 0; i < 200; i++ {
			d := Backoff(tt.attempt, lo, hi)
			if d < tt.ceiling/2 || d > tt.ceiling {
				t.Fatalf("Backoff(%d) = %s, want within [%s, %s]", tt.attempt, d, tt.ceiling/2, tt.ceiling)
			}
		}
	}
}
