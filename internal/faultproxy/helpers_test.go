package faultproxy

import (
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// server is a loopback TCP server standing in for PostgreSQL or Kafka. It
// runs handle for every connection it accepts and closes the connection
// when handle returns; close stops it and waits for every handler.
type server struct {
	ln       net.Listener
	done     chan struct{} // closed by close: handlers blocked on it return
	wg       sync.WaitGroup
	accepted atomic.Int64
	received atomic.Int64 // bytes the echo handler read

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	// peers receives every connection of a server started by peerServer.
	peers chan net.Conn

	closeOnce sync.Once
}

func startServer(t *testing.T, handle func(s *server, c net.Conn)) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	s := &server{ln: ln, done: make(chan struct{}), conns: map[net.Conn]struct{}{}, peers: make(chan net.Conn, 16)}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by close
			}
			s.accepted.Add(1)
			s.mu.Lock()
			s.conns[c] = struct{}{}
			s.mu.Unlock()
			s.wg.Go(func() {
				defer func() {
					s.mu.Lock()
					delete(s.conns, c)
					s.mu.Unlock()
					c.Close()
				}()
				handle(s, c)
			})
		}
	})
	t.Cleanup(s.close)
	return s
}

func (s *server) addr() string { return s.ln.Addr().String() }

func (s *server) close() {
	s.closeOnce.Do(func() {
		close(s.done)
		s.ln.Close()
		s.mu.Lock()
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
}

// echoServer echoes every byte back and, at the client's end of stream,
// half-closes in turn.
func echoServer(t *testing.T) *server {
	return startServer(t, func(s *server, c net.Conn) {
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			s.received.Add(int64(n))
			if n > 0 {
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					c.(*net.TCPConn).CloseWrite()
				}
				return
			}
		}
	})
}

// peerServer hands every connection to the test through s.peers, to be
// driven from the server side; it stays open until the test closes it or
// the server closes.
func peerServer(t *testing.T) *server {
	return startServer(t, func(s *server, c net.Conn) {
		select {
		case s.peers <- c:
		case <-s.done:
			return
		}
		<-s.done
	})
}

// nextPeer returns the server side of the next connection to s.
func (s *server) nextPeer(t *testing.T) net.Conn {
	t.Helper()
	select {
	case c := <-s.peers:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no connection reached the server within 5s")
		return nil
	}
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func write(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write(b); err != nil {
		t.Fatalf("write %d bytes: %v", len(b), err)
	}
}

// readN reads exactly n bytes within timeout.
func readN(t *testing.T, c net.Conn, n int, timeout time.Duration) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(timeout))
	b := make([]byte, n)
	if got, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: got %d: %v", n, got, err)
	}
	return b
}

// expectStalled checks that nothing arrives on c within d and that c is
// still open: the read times out rather than ending or failing.
func expectStalled(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	n, err := c.Read(b[:])
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read during stall: got %d bytes, err %v; want a timeout", n, err)
	}
}

// expectBroken checks that a read on c fails (end of stream or reset)
// within 2s, and returns the error.
func expectBroken(t *testing.T, c net.Conn) error {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	b := make([]byte, 64<<10)
	for {
		_, err := c.Read(b)
		if err == nil {
			continue // bytes in flight before the cut
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal("connection still open 2s after it was cut")
		}
		return err
	}
}

// eventually polls cond until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// payload returns n deterministic pseudo-random bytes.
func payload(n int, seed byte) []byte {
	b := make([]byte, n)
	var s [32]byte
	s[0] = seed
	rand.NewChaCha8(s).Read(b)
	return b
}
