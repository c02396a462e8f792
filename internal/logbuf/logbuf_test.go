package logbuf

import (
	"fmt"
	"sync"
	"testing"
)

func TestBufferConcurrentWritesAndReads(t *testing.T) {
	var b Buffer
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 100 {
				fmt.Fprintf(&b, "w%d-%d\n", i, j)
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.Count("\n"); got != 800 {
		t.Errorf("Count(newline) = %d, want 800", got)
	}
	if got := b.Count("w3-"); got != 100 {
		t.Errorf("Count(w3-) = %d, want 100", got)
	}
}

func TestTail(t *testing.T) {
	var b Buffer
	b.Write([]byte("abcdef"))
	for _, tt := range []struct {
		n    int
		want string
	}{{10, "abcdef"}, {6, "abcdef"}, {2, "...ef"}} {
		if got := b.Tail(tt.n); got != tt.want {
			t.Errorf("Tail(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}
