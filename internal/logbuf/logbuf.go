// Package logbuf is an in-memory io.Writer that tests hand to a logger or a
// child process while reading it from another goroutine: a bytes.Buffer
// alone is not safe for that.
package logbuf

import (
	"bytes"
	"strings"
	"sync"
)

// Buffer collects what is written to it. The zero value is ready to use;
// all methods are safe for concurrent use.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write appends p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns everything written so far.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count returns how many times s occurs in what was written.
func (b *Buffer) Count(s string) int { return strings.Count(b.String(), s) }

// Tail returns the last n bytes written, prefixed with "..." when there was
// more, for failure messages that must stay readable.
func (b *Buffer) Tail(n int) string {
	s := b.String()
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// Reset discards everything written so far.
func (b *Buffer) Reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf.Reset()
}
