package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/internal/logbuf"
)

// The metrics server set only ReadHeaderTimeout: a client that keeps a
// connection open between requests (or reads a response slowly) held it
// and a file descriptor forever, with no bound on how many.
func TestMetricsServerLimits(t *testing.T) {
	srv, err := startMetricsServer("127.0.0.1:0", prometheus.NewRegistry(), nil, nil, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer srv.ln.Close()
	s := srv.Server
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 {
		t.Errorf("timeouts: header %s, read %s, write %s, idle %s; want all set", s.ReadHeaderTimeout, s.ReadTimeout, s.WriteTimeout, s.IdleTimeout)
	}
	if s.MaxHeaderBytes <= 0 || s.MaxHeaderBytes > 64<<10 {
		t.Errorf("MaxHeaderBytes = %d, want a small limit", s.MaxHeaderBytes)
	}
	if _, ok := srv.ln.(*limitedListener); !ok {
		t.Errorf("listener %T has no connection limit", srv.ln)
	}
}

// An idle keep-alive connection is closed after the idle timeout, and
// connections beyond the limit wait until one is released.
func TestHTTPServerIdleAndConnectionLimit(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	lim := httpLimits{readHeader: time.Second, read: time.Second, write: time.Second, idle: 200 * time.Millisecond, maxHeaderBytes: 4 << 10, maxConns: 1}
	s := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }), lim)
	lln := limitListener(ln, lim.maxConns)
	go s.Serve(lln)
	defer s.Close()

	c1, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c1.Close()
	fmt.Fprintf(c1, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c1)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()

	// A second client waits: the only connection slot is held by c1.
	got := make(chan error, 1)
	go func() {
		cl := &http.Client{Timeout: 5 * time.Second}
		resp, err := cl.Get("http://" + ln.Addr().String() + "/")
		if err == nil {
			resp.Body.Close()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("second connection served while the limit was reached (err %v)", err)
	case <-time.After(100 * time.Millisecond):
	}
	// c1 stays idle: the server closes it after the idle timeout, which
	// frees the slot for the second client.
	c1.SetReadDeadline(time.Now().Add(3 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("idle connection: read %v, want EOF (closed by the server)", err)
	}
	if err := <-got; err != nil {
		t.Errorf("second client: %v", err)
	}
}

type countingPinger struct {
	n   atomic.Int32
	err error
}

func (p *countingPinger) Ping(context.Context) error { p.n.Add(1); return p.err }

// /readyz pinged Kafka on every request, unauthenticated, and echoed the
// error text; now the result is cached briefly and the error is logged.
func TestReadyzCachesAndHidesError(t *testing.T) {
	var logs logbuf.Buffer
	p := &countingPinger{err: errors.New("dial tcp 10.1.2.3:9093: SASL authentication failed for user svc-walbox")}
	now := time.Unix(1000, 0)
	h := newReadiness(fakeRelayState{streaming: true}, p, slog.New(slog.NewTextHandler(&logs, nil)))
	h.now = func() time.Time { return now }
	get := func() *httptest.ResponseRecorder {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		return rec
	}
	for range 10 {
		rec := get()
		if rec.Code != 503 || !strings.Contains(rec.Body.String(), "kafka unreachable") {
			t.Fatalf("/readyz = %d %q", rec.Code, rec.Body)
		}
		if strings.Contains(rec.Body.String(), "svc-walbox") || strings.Contains(rec.Body.String(), "10.1.2.3") {
			t.Errorf("the body shows the error text: %q", rec.Body)
		}
	}
	if n := p.n.Load(); n != 1 {
		t.Errorf("%d pings for 10 requests within the cache time, want 1", n)
	}
	if !strings.Contains(logs.String(), "svc-walbox") {
		t.Errorf("the error is not logged: %s", logs.String())
	}
	now = now.Add(readyCacheTTL + time.Millisecond)
	p.err = nil
	if rec := get(); rec.Code != 200 || p.n.Load() != 2 {
		t.Errorf("after the cache time: %d %q, %d pings", rec.Code, rec.Body, p.n.Load())
	}
}
