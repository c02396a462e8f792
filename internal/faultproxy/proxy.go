package faultproxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Mode is what a Proxy does with the bytes of its connections.
type Mode int

const (
	// ModeForward forwards bytes both ways. It is the initial mode.
	ModeForward Mode = iota
	// ModeDrop resets every connection, open or new.
	ModeDrop
	// ModeBlackhole keeps connections open and holds their bytes.
	ModeBlackhole
)

func (m Mode) String() string {
	switch m {
	case ModeForward:
		return "forward"
	case ModeDrop:
		return "drop"
	case ModeBlackhole:
		return "blackhole"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Stats counts what a Proxy has done since it started.
type Stats struct {
	// Accepted is the number of connections accepted, Refused included.
	Accepted int64
	// Refused is the number of connections reset as soon as they were
	// accepted: during Drop, or while no target was set.
	Refused int64
	// DialFailures is the number of connections reset because the target
	// could not be dialled.
	DialFailures int64
	// Open is the number of connections open now, including those held
	// undialled by a blackhole.
	Open int
	// ClientToTarget and TargetToClient are the bytes delivered each way.
	// Bytes held by a blackhole or by latency are not counted until they
	// are delivered.
	ClientToTarget int64
	TargetToClient int64
}

// dialTimeout bounds a dial to the target; Drop, CloseAll and Close cut it
// short.
const dialTimeout = 10 * time.Second

// Proxy forwards TCP connections from a loopback listener to a target
// address, and injects faults on request. Create one with Start or
// StartListener; the zero value is not usable. All methods are safe for
// concurrent use.
type Proxy struct {
	ln   net.Listener
	port int

	mu      sync.Mutex
	target  string // "" until set: connections are then refused
	mode    Mode
	latency time.Duration
	changed chan struct{} // closed (and replaced) when mode or latency changes
	links   map[*link]struct{}
	closed  bool

	closing   chan struct{} // closed by Close: ends the accept loop's backoff
	closeOnce sync.Once
	closeErr  error
	// wg counts every goroutine of the Proxy: the accept loop, and one per
	// connection, which itself waits for its pumps. Close waits for it.
	wg sync.WaitGroup

	accepted       atomic.Int64
	refused        atomic.Int64
	dialFailures   atomic.Int64
	clientToTarget atomic.Int64
	targetToClient atomic.Int64
}

// Start listens on 127.0.0.1 at a free port and forwards every connection
// to target (host:port), in ModeForward with no latency. The target is
// dialled once per accepted connection, when its bytes may first flow; it
// need not be listening yet. Close the Proxy when done.
func Start(target string) (*Proxy, error) {
	if err := validTarget(target); err != nil {
		return nil, err
	}
	p, err := StartListener()
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.target = target
	p.mu.Unlock()
	return p, nil
}

// StartListener is Start without a target: the Proxy listens, and resets
// every connection it accepts, until SetTarget. It serves a server that
// must be told the proxy's address before it starts, such as a Kafka broker
// advertising it (see the package documentation).
func StartListener() (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultproxy: listen on loopback: %w", err)
	}
	p := &Proxy{
		ln:      ln,
		port:    ln.Addr().(*net.TCPAddr).Port,
		changed: make(chan struct{}),
		links:   make(map[*link]struct{}),
		closing: make(chan struct{}),
	}
	p.wg.Go(p.acceptLoop)
	return p, nil
}

// Addr returns the address to give the client instead of the target's,
// 127.0.0.1:port.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Port returns the port of Addr.
func (p *Proxy) Port() int { return p.port }

// SetTarget sets the address (host:port) that connections accepted from now
// on are forwarded to. Open connections keep their target. It returns an
// error wrapping ErrInvalidTarget for an address without a host or port,
// and ErrClosed after Close.
func (p *Proxy) SetTarget(target string) error {
	if err := validTarget(target); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.target = target
	return nil
}

// Target returns the target of new connections, "" if none is set.
func (p *Proxy) Target() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.target
}

func validTarget(target string) error {
	host, port, err := net.SplitHostPort(target)
	if err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidTarget, target, err)
	}
	if host == "" || port == "" {
		return fmt.Errorf("%w %q: want host:port", ErrInvalidTarget, target)
	}
	return nil
}

// Mode returns the current mode.
func (p *Proxy) Mode() Mode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode
}

// Drop resets every open connection on both sides (SO_LINGER 0, so the
// peers get a TCP reset, not a clean end of stream) and switches to
// ModeDrop: new connections are accepted and reset at once, until Restore
// or Blackhole. When Drop returns, the resets have been sent.
func (p *Proxy) Drop() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.setModeLocked(ModeDrop)
	ls := p.linksLocked()
	p.mu.Unlock()
	for _, l := range ls {
		l.abort()
	}
}

// Blackhole switches to ModeBlackhole, a network partition: connections,
// open and new, stay open, but no byte goes through in either direction
// until Restore. Bytes sent meanwhile are held, in order, and delivered
// after Restore; see the package documentation for what a client can still
// notice.
func (p *Proxy) Blackhole() { p.setMode(ModeBlackhole) }

// Restore switches to ModeForward. After a blackhole the partition heals:
// the connections that were open through it resume, and the bytes held
// arrive. Call CloseAll as well to make them fail instead.
func (p *Proxy) Restore() { p.setMode(ModeForward) }

// CloseAll resets every open connection on both sides, as Drop does, but
// leaves the mode alone: in ModeForward new connections work at once, in
// ModeBlackhole they are held.
func (p *Proxy) CloseAll() {
	p.mu.Lock()
	ls := p.linksLocked()
	p.mu.Unlock()
	for _, l := range ls {
		l.abort()
	}
}

// StallOpen stops, for good, the target-to-client direction of every
// connection open now: the client receives nothing more on it while its
// own bytes still reach the target, and the target's writes block once the
// proxy's 256 KiB and the socket buffers are full. It models a connection
// that TCP stopped delivering (a receive queue pruned under memory pressure,
// a retransmission timer backed off to minutes) while both peers are alive:
// only the client's own watch of what it receives can notice. Connections
// accepted later are not affected; the stalled ones end when either peer
// closes them, or by CloseAll, Drop or Close.
func (p *Proxy) StallOpen() {
	p.mu.Lock()
	ls := p.linksLocked()
	p.mu.Unlock()
	for _, l := range ls {
		l.stallOnce()
	}
}

// SetLatency delays every chunk, in both directions and on open
// connections too, by d from the moment the proxy read it; d <= 0 removes
// the delay. The initial latency is 0.
func (p *Proxy) SetLatency(d time.Duration) {
	d = max(d, 0)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.latency != d {
		p.latency = d
		p.broadcastLocked()
	}
}

// Stats returns the counters of the Proxy.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := len(p.links)
	p.mu.Unlock()
	return Stats{
		Accepted:       p.accepted.Load(),
		Refused:        p.refused.Load(),
		DialFailures:   p.dialFailures.Load(),
		Open:           open,
		ClientToTarget: p.clientToTarget.Load(),
		TargetToClient: p.targetToClient.Load(),
	}
}

// Close stops listening, resets every open connection, and waits for all
// the Proxy's goroutines to end. Later calls return the first call's
// result; a call concurrent with the first waits for it. After Close the
// fault methods do nothing.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		ls := p.linksLocked()
		p.mu.Unlock()
		close(p.closing)
		if err := p.ln.Close(); err != nil {
			p.closeErr = fmt.Errorf("faultproxy: close listener %s: %w", p.ln.Addr(), err)
		}
		for _, l := range ls {
			l.abort()
		}
		p.wg.Wait()
	})
	return p.closeErr
}

func (p *Proxy) setMode(m Mode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.setModeLocked(m)
	}
}

func (p *Proxy) setModeLocked(m Mode) {
	if p.mode != m {
		p.mode = m
		p.broadcastLocked()
	}
}

// broadcastLocked wakes every pump waiting in await, so that it looks at
// the new mode and latency.
func (p *Proxy) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) linksLocked() []*link {
	ls := make([]*link, 0, len(p.links))
	for l := range p.links {
		ls = append(ls, l)
	}
	return ls
}

func (p *Proxy) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Anything else is transient (EMFILE, a connection reset
			// while in the accept queue): back off as net/http does,
			// rather than spin.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			t := time.NewTimer(backoff)
			select {
			case <-p.closing:
				t.Stop()
				return
			case <-t.C:
			}
			continue
		}
		backoff = 0
		p.accepted.Add(1)
		p.admit(c)
	}
}

// admit registers c as a link and starts its goroutine, or resets it when
// the mode, a missing target or Close says so. Registration and the mode
// check share p.mu with Drop and Close, so no connection slips past them.
func (p *Proxy) admit(c net.Conn) {
	p.mu.Lock()
	if p.closed || p.mode == ModeDrop || p.target == "" {
		p.mu.Unlock()
		p.refused.Add(1)
		reset(c)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	l := &link{client: c, target: p.target, cancel: cancel, stalled: make(chan struct{})}
	p.links[l] = struct{}{}
	p.wg.Go(func() { p.serve(ctx, l) })
	p.mu.Unlock()
}

func (p *Proxy) forget(l *link) {
	p.mu.Lock()
	delete(p.links, l)
	p.mu.Unlock()
}

// await blocks until a chunk read at `at` may be delivered: the mode is
// ModeForward and the latency has passed since `at`. It returns false when
// ctx ends first (the link was reset). A zero `at` waits for the mode only.
func (p *Proxy) await(ctx context.Context, at time.Time) bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ctx.Err() != nil {
			return false
		}
		p.mu.Lock()
		mode, latency, changed := p.mode, p.latency, p.changed
		p.mu.Unlock()
		var fire <-chan time.Time
		if mode == ModeForward {
			wait := time.Duration(0)
			if !at.IsZero() {
				wait = time.Until(at.Add(latency))
			}
			if wait <= 0 {
				return true
			}
			if timer == nil {
				timer = time.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C
		}
		// Loop on every wake-up: the mode may have changed again.
		select {
		case <-fire:
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}
