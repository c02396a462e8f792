package faultproxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The tests are not parallel: TestCloseLeavesNoGoroutines counts the
// process's goroutines.

func TestStartInvalidTarget(t *testing.T) {
	tests := []struct {
		name   string
		target string
	}{
		{name: "empty", target: ""},
		{name: "no port", target: "127.0.0.1"},
		{name: "empty port", target: "127.0.0.1:"},
		{name: "empty host", target: ":5432"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Start(tt.target)
			if err == nil {
				p.Close()
				t.Fatalf("Start(%q) = nil error, want ErrInvalidTarget", tt.target)
			}
			if !errors.Is(err, ErrInvalidTarget) {
				t.Fatalf("Start(%q) = %v, want ErrInvalidTarget", tt.target, err)
			}
		})
	}
}

func TestAddrAndPort(t *testing.T) {
	p := New(t, "127.0.0.1:1")
	host, port, err := net.SplitHostPort(p.Addr())
	if err != nil || host != "127.0.0.1" || port != fmt.Sprint(p.Port()) || p.Port() == 0 {
		t.Fatalf("Addr() = %q, Port() = %d; want 127.0.0.1:<Port()>", p.Addr(), p.Port())
	}
	if got := p.Mode(); got != ModeForward {
		t.Fatalf("initial Mode() = %v, want forward", got)
	}
}

// TestForward sends data through the proxy to an echo server and checks
// that every byte comes back, in order, and that the client's end of
// stream travels through to the server and back.
func TestForward(t *testing.T) {
	tests := []struct {
		name    string
		size    int
		latency time.Duration
	}{
		{name: "one byte", size: 1},
		{name: "odd size above a chunk", size: chunkSize*2 + 3},
		{name: "8 MiB", size: 8 << 20},
		{name: "2 MiB with latency", size: 2 << 20, latency: 20 * time.Millisecond},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			echo := echoServer(t)
			p := New(t, echo.addr())
			p.SetLatency(tt.latency)
			c := dial(t, p.Addr())
			data := payload(tt.size, byte(i))

			var wg sync.WaitGroup
			var werr error
			wg.Go(func() {
				c.SetWriteDeadline(time.Now().Add(30 * time.Second))
				if _, werr = c.Write(data); werr == nil {
					werr = c.(*net.TCPConn).CloseWrite()
				}
			})
			c.SetReadDeadline(time.Now().Add(30 * time.Second))
			got, rerr := io.ReadAll(c) // to the echoed end of stream
			wg.Wait()
			if werr != nil {
				t.Fatalf("write: %v", werr)
			}
			if rerr != nil {
				t.Fatalf("read: %v (after %d bytes)", rerr, len(got))
			}
			if !bytes.Equal(got, data) {
				t.Fatalf("echoed %d bytes, sent %d; equal lengths: %v", len(got), len(data), len(got) == len(data))
			}
			want := int64(tt.size)
			eventually(t, 5*time.Second, "stats to count every byte", func() bool {
				s := p.Stats()
				return s.ClientToTarget == want && s.TargetToClient == want
			})
			// Both sides have ended their stream: the link closes itself.
			eventually(t, 5*time.Second, "the link to close", func() bool { return p.Stats().Open == 0 })
			if s := p.Stats(); s.Accepted != 1 || s.Refused != 0 || s.DialFailures != 0 {
				t.Fatalf("Stats() = %+v, want 1 accepted, none refused or failed", s)
			}
		})
	}
}

// TestHalfClose checks that the side that ends its stream first can still
// receive the other side's reply, whichever side it is.
func TestHalfClose(t *testing.T) {
	tests := []struct {
		name        string
		serverFirst bool
	}{
		{name: "client ends first"},
		{name: "server ends first", serverFirst: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := peerServer(t)
			p := New(t, srv.addr())
			client := dial(t, p.Addr())
			write(t, client, []byte("hi")) // makes the proxy dial
			server := srv.nextPeer(t)
			readN(t, server, 2, 5*time.Second)

			first, second := client, server
			if tt.serverFirst {
				first, second = server, client
			}
			request, reply := payload(300<<10, 1), payload(200<<10, 2)
			write(t, first, request)
			first.(*net.TCPConn).CloseWrite()
			second.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err := io.ReadAll(second)
			if err != nil || !bytes.Equal(got, request) {
				t.Fatalf("request: got %d bytes, err %v; want %d bytes then EOF", len(got), err, len(request))
			}
			write(t, second, reply)
			second.(*net.TCPConn).CloseWrite()
			first.SetReadDeadline(time.Now().Add(10 * time.Second))
			got, err = io.ReadAll(first)
			if err != nil || !bytes.Equal(got, reply) {
				t.Fatalf("reply: got %d bytes, err %v; want %d bytes then EOF", len(got), err, len(reply))
			}
			eventually(t, 5*time.Second, "the link to close", func() bool { return p.Stats().Open == 0 })
		})
	}
}

// isResetOrEOF reports whether err is how a peer learns its connection was
// cut: a reset, or an end of stream.
func isResetOrEOF(err error) bool {
	return errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF)
}

func TestDrop(t *testing.T) {
	srv := peerServer(t)
	p := New(t, srv.addr())
	client := dial(t, p.Addr())
	write(t, client, []byte("ping"))
	server := srv.nextPeer(t)
	readN(t, server, 4, 5*time.Second)

	p.Drop()
	if got := p.Mode(); got != ModeDrop {
		t.Fatalf("Mode() = %v after Drop, want drop", got)
	}
	// Both sides see the cut at once, as a reset (SO_LINGER 0).
	for _, side := range []struct {
		name string
		c    net.Conn
	}{{"client", client}, {"server", server}} {
		if err := expectBroken(t, side.c); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("%s read after Drop: %v, want a connection reset", side.name, err)
		}
	}

	// New connections are accepted and reset, and never reach the server.
	refusedBefore := p.Stats().Refused
	// The reset can beat the end of the client's own connect on loopback.
	c2, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err == nil {
		defer c2.Close()
		err = expectBroken(t, c2)
	}
	if !isResetOrEOF(err) {
		t.Fatalf("connection made during Drop: %v, want reset or EOF", err)
	}
	eventually(t, 5*time.Second, "the new connection to be refused", func() bool {
		return p.Stats().Refused == refusedBefore+1
	})
	if n := srv.accepted.Load(); n != 1 {
		t.Fatalf("server accepted %d connections, want only the one before Drop", n)
	}
	eventually(t, 5*time.Second, "no open link", func() bool { return p.Stats().Open == 0 })

	p.Restore()
	c3 := dial(t, p.Addr())
	write(t, c3, []byte("back"))
	s3 := srv.nextPeer(t)
	if got := readN(t, s3, 4, 5*time.Second); string(got) != "back" {
		t.Fatalf("after Restore the server read %q, want %q", got, "back")
	}
}

// TestBlackhole checks that a blackhole stalls open and new connections in
// both directions without closing them, and that Restore delivers what was
// held, in order.
func TestBlackhole(t *testing.T) {
	srv := peerServer(t)
	p := New(t, srv.addr())
	client := dial(t, p.Addr())
	write(t, client, []byte("hello"))
	server := srv.nextPeer(t)
	readN(t, server, 5, 5*time.Second)
	// The count follows the write the server has just read from.
	eventually(t, 5*time.Second, "hello to be counted", func() bool { return p.Stats().ClientToTarget == 5 })
	before := p.Stats()

	p.Blackhole()
	// More than the proxy and the socket buffers hold, so the writer
	// blocks until Restore: nothing is dropped on the floor.
	big := payload(4<<20, 3)
	var wg sync.WaitGroup
	var werr error
	wg.Go(func() {
		client.SetWriteDeadline(time.Now().Add(30 * time.Second))
		if _, werr = client.Write([]byte("c1")); werr == nil {
			_, werr = client.Write(big)
		}
	})
	write(t, server, []byte("s1"))
	// A connection made during the blackhole is accepted but goes nowhere.
	late := dial(t, p.Addr())
	write(t, late, []byte("late"))

	expectStalled(t, client, 300*time.Millisecond)
	expectStalled(t, server, 300*time.Millisecond)
	expectStalled(t, late, 50*time.Millisecond)
	if after := p.Stats(); after.ClientToTarget != before.ClientToTarget || after.TargetToClient != before.TargetToClient {
		t.Fatalf("bytes delivered during the blackhole: before %+v, after %+v", before, after)
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Fatalf("server accepted %d connections during the blackhole, want only the first", n)
	}
	eventually(t, 5*time.Second, "two open links (held, not closed)", func() bool { return p.Stats().Open == 2 })

	p.Restore()
	if got := readN(t, client, 2, 5*time.Second); string(got) != "s1" {
		t.Fatalf("client read %q after Restore, want %q", got, "s1")
	}
	want := append([]byte("c1"), big...)
	if got := readN(t, server, len(want), 30*time.Second); !bytes.Equal(got, want) {
		t.Fatal("server read different bytes after Restore than the client sent")
	}
	wg.Wait()
	if werr != nil {
		t.Fatalf("client write: %v", werr)
	}
	lateServer := srv.nextPeer(t)
	if got := readN(t, lateServer, 4, 5*time.Second); string(got) != "late" {
		t.Fatalf("late connection's server side read %q, want %q", got, "late")
	}
	// And the connections work both ways afterwards.
	write(t, lateServer, []byte("ok"))
	if got := readN(t, late, 2, 5*time.Second); string(got) != "ok" {
		t.Fatalf("late connection read %q, want %q", got, "ok")
	}
}

// TestBlackholeHoldsClose checks that a peer closing its side during a
// blackhole is not seen by the other side until Restore, as in a real
// partition (for PostgreSQL: the walsender keeps the slot active).
func TestBlackholeHoldsClose(t *testing.T) {
	tests := []struct {
		name  string
		reset bool // close with a reset rather than a FIN
		want  func(error) bool
	}{
		{name: "end of stream", want: func(err error) bool { return errors.Is(err, io.EOF) }},
		{name: "reset", reset: true, want: func(err error) bool { return errors.Is(err, syscall.ECONNRESET) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := peerServer(t)
			p := New(t, srv.addr())
			client := dial(t, p.Addr())
			write(t, client, []byte("x"))
			server := srv.nextPeer(t)
			readN(t, server, 1, 5*time.Second)

			p.Blackhole()
			if tt.reset {
				client.(*net.TCPConn).SetLinger(0)
			}
			client.Close()
			expectStalled(t, server, 300*time.Millisecond)

			p.Restore()
			if err := expectBroken(t, server); !tt.want(err) {
				t.Fatalf("server read after Restore: %v", err)
			}
		})
	}
}

func TestCloseAll(t *testing.T) {
	tests := []struct {
		name      string
		blackhole bool
	}{
		{name: "forwarding"},
		{name: "during a blackhole", blackhole: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := peerServer(t)
			p := New(t, srv.addr())
			old := dial(t, p.Addr())
			write(t, old, []byte("a"))
			oldServer := srv.nextPeer(t)
			readN(t, oldServer, 1, 5*time.Second)
			wantMode := ModeForward
			if tt.blackhole {
				p.Blackhole()
				wantMode = ModeBlackhole
			}

			p.CloseAll()
			if got := p.Mode(); got != wantMode {
				t.Fatalf("Mode() = %v after CloseAll, want %v", got, wantMode)
			}
			for _, c := range []net.Conn{old, oldServer} {
				if err := expectBroken(t, c); !errors.Is(err, syscall.ECONNRESET) {
					t.Fatalf("read after CloseAll: %v, want a connection reset", err)
				}
			}

			// New connections are still accepted; in a blackhole they
			// are held until Restore.
			c := dial(t, p.Addr())
			write(t, c, []byte("b"))
			if tt.blackhole {
				expectStalled(t, c, 100*time.Millisecond)
				p.Restore()
			}
			s := srv.nextPeer(t)
			if got := readN(t, s, 1, 5*time.Second); string(got) != "b" {
				t.Fatalf("server read %q, want %q", got, "b")
			}
			if got := p.Stats().Refused; got != 0 {
				t.Fatalf("Stats().Refused = %d, want 0", got)
			}
		})
	}
}

func TestLatency(t *testing.T) {
	echo := echoServer(t)
	p := New(t, echo.addr())
	c := dial(t, p.Addr())

	const latency = 100 * time.Millisecond
	p.SetLatency(latency)
	start := time.Now()
	write(t, c, []byte("x"))
	readN(t, c, 1, 5*time.Second)
	if rtt := time.Since(start); rtt < 2*latency {
		t.Fatalf("round trip took %v with a one-way latency of %v, want at least %v", rtt, latency, 2*latency)
	}

	// Lowering the latency releases chunks already waiting.
	p.SetLatency(time.Hour)
	write(t, c, []byte("y"))
	expectStalled(t, c, 100*time.Millisecond)
	p.SetLatency(-1) // same as 0
	if got := readN(t, c, 1, 5*time.Second); string(got) != "y" {
		t.Fatalf("read %q, want %q", got, "y")
	}
}

func TestStartListenerSetTarget(t *testing.T) {
	p, err := StartListener()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	if got := p.Target(); got != "" {
		t.Fatalf("Target() = %q before SetTarget, want empty", got)
	}

	// Before SetTarget, connections are reset like during Drop.
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err == nil {
		defer c.Close()
		err = expectBroken(t, c)
	}
	if !isResetOrEOF(err) {
		t.Fatalf("connection before SetTarget: %v, want reset or EOF", err)
	}
	eventually(t, 5*time.Second, "the connection to be refused", func() bool { return p.Stats().Refused == 1 })

	if err := p.SetTarget("nonsense"); !errors.Is(err, ErrInvalidTarget) {
		t.Fatalf("SetTarget(nonsense) = %v, want ErrInvalidTarget", err)
	}
	first, second := echoServer(t), echoServer(t)
	if err := p.SetTarget(first.addr()); err != nil {
		t.Fatal(err)
	}
	c1 := dial(t, p.Addr())
	write(t, c1, []byte("1"))
	readN(t, c1, 1, 5*time.Second)

	// A new target applies to new connections only.
	if err := p.SetTarget(second.addr()); err != nil {
		t.Fatal(err)
	}
	c2 := dial(t, p.Addr())
	write(t, c2, []byte("22"))
	readN(t, c2, 2, 5*time.Second)
	write(t, c1, []byte("1"))
	readN(t, c1, 1, 5*time.Second)
	if a, b := first.received.Load(), second.received.Load(); a != 2 || b != 2 {
		t.Fatalf("first target received %d bytes, second %d; want 2 and 2", a, b)
	}

	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.SetTarget(first.addr()); !errors.Is(err, ErrClosed) {
		t.Fatalf("SetTarget after Close = %v, want ErrClosed", err)
	}
}

func TestDialFailure(t *testing.T) {
	// A port nothing listens on: take one, then free it.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()

	p := New(t, dead)
	// The reset can beat the end of the client's own connect on loopback.
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err == nil {
		defer c.Close()
		err = expectBroken(t, c)
	}
	if !isResetOrEOF(err) {
		t.Fatalf("connection with an unreachable target: %v, want reset or EOF", err)
	}
	eventually(t, 5*time.Second, "the dial failure to be counted", func() bool {
		s := p.Stats()
		return s.DialFailures == 1 && s.Open == 0
	})
}

// TestCloseLeavesNoGoroutines closes a proxy with connections in every state
// (forwarding, held by a blackhole with data in flight, accepted but not yet
// dialled, waiting out latency) and checks that no goroutine survives it.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	before := runtime.NumGoroutine()

	srv := peerServer(t)
	p, err := Start(srv.addr())
	if err != nil {
		t.Fatal(err)
	}
	forwarding := dial(t, p.Addr())
	write(t, forwarding, []byte("f"))
	fs := srv.nextPeer(t)
	readN(t, fs, 1, 5*time.Second)

	p.SetLatency(time.Hour)
	write(t, forwarding, []byte("delayed"))
	write(t, fs, []byte("delayed"))
	p.Blackhole()
	// Accepted, held undialled; the bytes fit the socket buffers.
	pending := dial(t, p.Addr())
	write(t, pending, payload(64<<10, 4))
	eventually(t, 5*time.Second, "the pending connection to be accepted", func() bool { return p.Stats().Open == 2 })

	// Close is idempotent, and concurrent callers all wait for the end.
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = p.Close() })
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Close #%d: %v", i, err)
		}
	}
	if err := p.Close(); err != nil {
		t.Fatalf("Close after Close: %v", err)
	}
	// Everything is a no-op on a closed proxy.
	p.Drop()
	p.Blackhole()
	p.Restore()
	p.CloseAll()
	p.SetLatency(time.Second)
	if s := p.Stats(); s.Open != 0 {
		t.Fatalf("Stats().Open = %d after Close, want 0", s.Open)
	}
	if _, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		t.Fatal("the proxy still accepts connections after Close")
	}
	if err := expectBroken(t, forwarding); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("client read after Close: %v, want a connection reset", err)
	}

	srv.close()
	var after int
	deadline := time.Now().Add(5 * time.Second)
	for after = runtime.NumGoroutine(); after > before && time.Now().Before(deadline); after = runtime.NumGoroutine() {
		time.Sleep(10 * time.Millisecond)
	}
	if after > before {
		buf := make([]byte, 1<<20)
		n := runtime.Stack(buf, true)
		t.Fatalf("%d goroutines before, %d after Close:\n%s", before, after, leftovers(buf[:n]))
	}
}

// leftovers keeps the goroutine dumps that mention this package.
func leftovers(dump []byte) string {
	var b strings.Builder
	for g := range strings.SplitSeq(string(dump), "\n\n") {
		if strings.Contains(g, "faultproxy") && !strings.Contains(g, "TestCloseLeavesNoGoroutines") {
			b.WriteString(g)
			b.WriteString("\n\n")
		}
	}
	if b.Len() == 0 {
		return string(dump)
	}
	return b.String()
}

// TestStallOpen checks that StallOpen stops the target-to-client direction
// of the open connections only: the client still reaches the server, and a
// connection made afterwards works both ways.
func TestStallOpen(t *testing.T) {
	srv := peerServer(t)
	p := New(t, srv.addr())
	client := dial(t, p.Addr())
	write(t, client, []byte("hi"))
	server := srv.nextPeer(t)
	readN(t, server, 2, 5*time.Second)

	p.StallOpen()
	write(t, server, []byte("lost"))
	expectStalled(t, client, 300*time.Millisecond)
	write(t, client, []byte("still"))
	if got := readN(t, server, 5, 5*time.Second); string(got) != "still" {
		t.Fatalf("server read %q from the stalled connection's client, want %q", got, "still")
	}

	fresh := dial(t, p.Addr())
	write(t, fresh, []byte("new"))
	freshServer := srv.nextPeer(t)
	readN(t, freshServer, 3, 5*time.Second)
	write(t, freshServer, []byte("ok"))
	if got := readN(t, fresh, 2, 5*time.Second); string(got) != "ok" {
		t.Fatalf("a connection made after StallOpen read %q, want %q", got, "ok")
	}
}
