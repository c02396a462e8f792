package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/schemareg"
)

// relayState is the part of *pipeline.Relay /readyz uses.
type relayState interface {
	Standby() bool
	Streaming() bool
	FailoverErased() (events uint64, at time.Time)
	SlotSkipped() (from, to pglogrepl.LSN, at time.Time, count uint64)
	AckWait() (waiting bool, records, bytes int64, silent time.Duration)
}

var _ relayState = (*pipeline.Relay)(nil)

// registryState is the part of *schemareg.Encoder /readyz uses.
type registryState interface {
	Unavailable() (subject string, ok bool)
}

var _ registryState = (*schemareg.Encoder)(nil)

// standbyWaits is the part of *heartbeat.Monitor /readyz uses.
type standbyWaits interface {
	WaitingForStandby() (held bool, inactiveSlots string)
}

// kafkaPinger is the part of *kgo.Client /readyz uses.
type kafkaPinger interface {
	Ping(ctx context.Context) error
}

// httpLimits bound what a client of the metrics and health server can
// hold: it serves anyone who reaches --metrics-addr, unauthenticated.
type httpLimits struct {
	readHeader, read, write, idle time.Duration
	maxHeaderBytes, maxConns      int
}

// metricsHTTPLimits are the metrics server's limits. A scrape or a probe
// is one small request: 10 s to read it and 30 s to write the answer
// (a large /metrics to a slow scraper) are generous; a keep-alive
// connection idle for 60 s is closed (Prometheus scrapes every 15 to 60 s
// and reconnects when needed); 64 connections are far more than the
// scrapers and probes of one process, and bound its file descriptors.
var metricsHTTPLimits = httpLimits{
	readHeader:     5 * time.Second,
	read:           10 * time.Second,
	write:          30 * time.Second,
	idle:           60 * time.Second,
	maxHeaderBytes: 16 << 10,
	maxConns:       64,
}

// newHTTPServer returns a server for h with the timeouts and header limit
// of lim; serve it on limitListener(ln, lim.maxConns).
func newHTTPServer(h http.Handler, lim httpLimits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: lim.readHeader,
		ReadTimeout:       lim.read,
		WriteTimeout:      lim.write,
		IdleTimeout:       lim.idle,
		MaxHeaderBytes:    lim.maxHeaderBytes,
	}
}

// limitedListener accepts at most cap(sem) connections at once: Accept
// waits for a connection to close before accepting another, so the
// clients beyond the limit wait in the kernel's backlog (a semaphore
// listener, as golang.org/x/net/netutil.LimitListener, which walbox does
// not otherwise depend on).
type limitedListener struct {
	net.Listener
	sem  chan struct{}
	done chan struct{}
	once sync.Once
}

func limitListener(ln net.Listener, n int) *limitedListener {
	return &limitedListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

func (l *limitedListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitedConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitedListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

type limitedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// healthz answers 200 as long as the process serves HTTP: a liveness probe
// that restarts walbox only when it is wedged, never while it waits as a
// standby or reconnects.
func healthz(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "alive")
}

// readyCacheTTL is how long /readyz reuses a Kafka ping's result: probes
// of several kubelets or load balancers, or anyone reaching the port, cost
// at most one ping per period.
const readyCacheTTL = time.Second

// readiness is the /readyz handler: 200 only while the relay streams from
// the slot and a Kafka broker answers a ping; 503 with the reason while
// standby, connecting, reconnecting, the schema registry fails
// transiently, or Kafka is unreachable. After a
// failover that erased events already sent to Kafka it stays 200 but says
// "streaming, degraded: ..." with the count: the condition is for
// consumers to compensate, not something a restart or an unready pod
// fixes (a 503 would stall rolling updates and a failing probe would
// restart walbox in a loop and lose the count); the alert rule
// WalboxFailoverErasedEvents pages on the metric. The reason
// never includes the ping's error text (it names brokers, users and
// causes, and the endpoint is unauthenticated): that is logged, once per
// ping. Safe for concurrent use.
type readiness struct {
	relay relayState
	kafka kafkaPinger
	// waits, when set, tells a stream the server holds back for a
	// standby of synchronized_standby_slots (the heartbeat monitor sees
	// it; without heartbeats nothing does).
	waits standbyWaits
	// registries are the schema registry encoders: one whose last
	// request failed transiently makes walbox unready (it retries).
	registries []registryState
	log        *slog.Logger
	now        func() time.Time

	mu     sync.Mutex
	pinged time.Time
	ok     bool
}

func newReadiness(relay relayState, kafka kafkaPinger, log *slog.Logger) *readiness {
	return &readiness{relay: relay, kafka: kafka, log: log, now: time.Now}
}

// kafkaOK pings Kafka unless the last ping is younger than readyCacheTTL.
// Concurrent callers wait for the one ping in flight.
func (h *readiness) kafkaOK() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.pinged.IsZero() && h.now().Sub(h.pinged) < readyCacheTTL {
		return h.ok
	}
	// Not the request's context: a caller that hangs up must not make the
	// cached result a failure.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	err := h.kafka.Ping(ctx)
	if err != nil {
		h.log.Warn("readiness: kafka unreachable", "err", err)
	}
	h.pinged, h.ok = h.now(), err == nil
	return h.ok
}

func (h *readiness) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	notReady := func(reason string) {
		w.WriteHeader(http.StatusServiceUnavailable)
		fmt.Fprintln(w, "not ready: "+reason)
	}
	switch {
	case h.relay.Standby():
		notReady("standby: another instance holds the slot")
		return
	case !h.relay.Streaming():
		notReady("not streaming: connecting to postgres or retrying")
		return
	}
	for _, r := range h.registries {
		if subject, failing := r.Unavailable(); failing {
			notReady("schema registry unavailable for " + subject + ", retrying (the cause is in walbox's log)")
			return
		}
	}
	// Judged by acknowledgements, not only by a ping: with two of three
	// brokers down the third answers pings while nothing is acknowledged
	// (issue 29: 20 of 20 samples said "streaming" during such a freeze).
	if waiting, records, bytes, silent := h.relay.AckWait(); waiting {
		notReady(fmt.Sprintf("waiting for kafka acknowledgements: none for %s while %d records (%d bytes) wait, the oldest unacknowledged at least that long (brokers down, or fewer in sync than min.insync.replicas; walbox holds the slot and retries, details in walbox's log)",
			silent.Round(time.Second), records, bytes))
		return
	}
	if h.kafka != nil && !h.kafkaOK() {
		notReady("kafka unreachable (the cause is in walbox's log)")
		return
	}
	if h.waits != nil {
		if held, slots := h.waits.WaitingForStandby(); held {
			// 200, as for the erased events below: a restart or an
			// unready pod fixes nothing; the standby must come back or
			// leave synchronized_standby_slots.
			if slots == "" {
				slots = "(all active, but not confirming)"
			}
			fmt.Fprintf(w, "degraded: connected, but receiving nothing: the server holds the slot's logical changes back until the standbys of synchronized_standby_slots confirm them; inactive there: %s (walbox_slot_waiting_for_standby; bring the standby back or take its slot out of synchronized_standby_slots)\n", slots)
			return
		}
	}
	// Both stay 200: walbox never received the skipped events, and
	// consumers compensate for erased ones; a restart or an unready pod
	// fixes neither. Each is a line of its own.
	degraded := false
	if from, to, at, n := h.relay.SlotSkipped(); n > 0 {
		fmt.Fprintf(w, "streaming, degraded: at %s the server skipped the transactions committed between %s and %s because someone else had moved the slot ahead of walbox (ranges skipped since the start: %d; re-publish them, docs/slots.md; details in walbox's log)\n",
			at.Format(time.RFC3339), from, to, n)
		degraded = true
	}
	if n, at := h.relay.FailoverErased(); n > 0 {
		fmt.Fprintf(w, "streaming, degraded: a failover at %s erased %d events already sent to Kafka (transactions the database no longer has; consumers may need to compensate; details in walbox's log)\n",
			at.Format(time.RFC3339), n)
		degraded = true
	}
	if degraded {
		return
	}
	fmt.Fprintln(w, "streaming")
}
