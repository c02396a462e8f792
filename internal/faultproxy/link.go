package faultproxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

const (
	// chunkSize is the most a pump reads, and then delivers, at once.
	chunkSize = 32 << 10
	// pipeChunks is how many chunks a direction holds in flight (read, not
	// yet delivered): 256 KiB. Beyond that the pump stops reading and the
	// sender's socket buffers fill, as they would if the network stalled.
	pipeChunks = 8
)

// link is one proxied connection: the accepted client side and, once
// dialled, the server side.
type link struct {
	client net.Conn
	target string
	// cancel ends the link's context, which stops its dial and every wait
	// of its pumps.
	cancel context.CancelFunc

	// stalled stops the target-to-client direction for good (StallOpen):
	// its writer delivers nothing more, and the reader stops once the
	// direction's chunks are all held.
	stalled chan struct{}

	mu     sync.Mutex
	server net.Conn // nil until dialled
	done   bool     // both sides closed (abort or finish)
}

// abort resets both sides of l and stops its goroutines. It is safe to call
// more than once and concurrently with everything else.
func (l *link) abort() {
	l.cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	reset(l.client)
	if l.server != nil {
		reset(l.server)
	}
}

// stallOnce closes l.stalled unless it is closed already.
func (l *link) stallOnce() {
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.stalled:
	default:
		close(l.stalled)
	}
}

// finish closes both sides of l normally once both directions have ended.
func (l *link) finish() {
	l.cancel()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		return
	}
	l.done = true
	l.client.Close()
	if l.server != nil {
		l.server.Close()
	}
}

// setServer records the dialled server side. It returns false, and resets
// s, if l was aborted during the dial.
func (l *link) setServer(s net.Conn) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.done {
		reset(s)
		return false
	}
	l.server = s
	return true
}

// reset closes c with SO_LINGER 0, so that its peer gets a TCP reset.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

// serve runs one link until both directions end or it is aborted. It is
// the owner of the link's pumps: it waits for them before returning.
func (p *Proxy) serve(ctx context.Context, l *link) {
	defer p.forget(l)
	defer l.finish() // after an abort, only cancels

	// A connection accepted during a blackhole does not reach the target
	// until the partition heals, as its SYN would not.
	if !p.await(ctx, time.Time{}) {
		return
	}
	d := net.Dialer{Timeout: dialTimeout}
	s, err := d.DialContext(ctx, "tcp", l.target)
	if err != nil {
		if ctx.Err() == nil {
			p.dialFailures.Add(1)
		}
		l.abort()
		return
	}
	if !l.setServer(s) {
		return
	}
	var wg sync.WaitGroup
	p.pipe(ctx, &wg, l, l.client, s, &p.clientToTarget, nil)
	p.pipe(ctx, &wg, l, s, l.client, &p.targetToClient, l.stalled)
	wg.Wait()
}

// chunk is what a direction's reader hands to its writer.
type chunk struct {
	buf []byte // a whole buffer, returned to the reader once delivered
	n   int    // bytes of buf read
	at  time.Time
	// err ends the direction: io.EOF forwards a half-close, anything else
	// resets the link. It is delivered after the chunk's bytes, and held
	// like them.
	err error
}

// pipe starts the two goroutines of one direction, src to dst: a reader that
// stamps chunks as they arrive, and a writer that delivers each when the
// mode and latency allow. Splitting them pipelines latency: a bulk transfer
// is delayed, not throttled to a chunk per delay.
func (p *Proxy) pipe(ctx context.Context, wg *sync.WaitGroup, l *link, src, dst net.Conn, delivered *atomic.Int64, stalled <-chan struct{}) {
	// Exactly pipeChunks buffers circulate, and each channel can hold all
	// of them, so neither send below ever blocks.
	full := make(chan chunk, pipeChunks)
	free := make(chan []byte, pipeChunks)
	wg.Go(func() { readPump(ctx, src, full, free) })
	wg.Go(func() { p.writePump(ctx, l, dst, full, free, delivered, stalled) })
}

func readPump(ctx context.Context, src net.Conn, full chan<- chunk, free <-chan []byte) {
	allocated := 0
	for {
		var buf []byte
		select {
		case buf = <-free:
		default:
			if allocated < pipeChunks {
				buf = make([]byte, chunkSize)
				allocated++
				break
			}
			select {
			case buf = <-free:
			case <-ctx.Done():
				return
			}
		}
		n, err := src.Read(buf)
		full <- chunk{buf: buf, n: n, at: time.Now(), err: err}
		if err != nil {
			return
		}
	}
}

func (p *Proxy) writePump(ctx context.Context, l *link, dst net.Conn, full <-chan chunk, free chan<- []byte, delivered *atomic.Int64, stalled <-chan struct{}) {
	for {
		var c chunk
		select {
		case c = <-full:
		case <-ctx.Done():
			return
		}
		select {
		case <-stalled: // nil (never) for the client-to-target direction
			<-ctx.Done()
			return
		default:
		}
		if !p.await(ctx, c.at) {
			return
		}
		if c.n > 0 {
			n, err := dst.Write(c.buf[:c.n])
			delivered.Add(int64(n))
			if err != nil {
				l.abort()
				return
			}
		}
		switch {
		case c.err == nil:
			free <- c.buf
		case errors.Is(c.err, io.EOF):
			// The source ended cleanly: pass the half-close on, and
			// let the other direction go on until it ends too.
			if err := closeWrite(dst); err != nil {
				l.abort()
			}
			return
		default:
			// A reset (or another failure) of the source: reset the
			// destination too rather than pretend a clean end.
			l.abort()
			return
		}
	}
}

func closeWrite(c net.Conn) error {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("faultproxy: connection cannot half-close")
}
