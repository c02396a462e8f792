package main

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/pgtest"
)

// instance is one runRelay in this process, stopped by the test.
type instance struct {
	cfg    config.Config
	logs   *logbuf.Buffer
	cancel context.CancelFunc
	done   chan error
	once   sync.Once
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func startInstance(t *testing.T, cfg config.Config) *instance {
	t.Helper()
	cfg.MetricsAddr = freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	in := &instance{cfg: cfg, logs: &logbuf.Buffer{}, cancel: cancel, done: make(chan error, 1)}
	go func() { in.done <- runRelay(ctx, cfg, in.logs) }()
	t.Cleanup(func() { in.stop(t) })
	return in
}

func (in *instance) stop(t *testing.T) {
	t.Helper()
	in.once.Do(func() {
		in.cancel()
		select {
		case err := <-in.done:
			if err != nil {
				t.Errorf("instance on %s stopped with %v\n%s", in.cfg.MetricsAddr, err, in.logs.Tail(2000))
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("instance on %s did not stop", in.cfg.MetricsAddr)
		}
	})
}

// get returns the status and body of a GET on the instance's HTTP server,
// or 0 while it does not answer yet.
func (in *instance) get(path string) (int, string) {
	resp, err := http.Get("http://" + in.cfg.MetricsAddr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// waitFor polls cond until it holds or 30s pass.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func metricLine(body, name string) string {
	for l := range strings.Lines(body) {
		if strings.HasPrefix(l, name+" ") {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// TestRunStandby runs two instances with --standby on one slot: the second
// reports itself as standby (one log line, walbox_standby 1, /readyz 503,
// /healthz 200) for as long as the first streams, well past
// --slot-busy-timeout, and takes over when the first stops.
func TestRunStandby(t *testing.T) {
	parallel(t)
	e := newTableEnv(t)
	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.Standby = true
	cfg.HeartbeatInterval = 200 * time.Millisecond
	cfg.SlotBusyTimeout = 200 * time.Millisecond // must not apply with --standby

	a := startInstance(t, cfg)
	waitFor(t, "the first instance to be ready", func() bool { c, _ := a.get("/readyz"); return c == 200 })

	b := startInstance(t, cfg)
	waitFor(t, "the second instance to stand by", func() bool {
		_, m := b.get("/metrics")
		return metricLine(m, "walbox_standby") == "walbox_standby 1"
	})
	if c, body := b.get("/readyz"); c != http.StatusServiceUnavailable || !strings.Contains(body, "standby") {
		t.Errorf("standby /readyz = %d %q, want 503 naming standby", c, body)
	}
	if _, m := b.get("/metrics"); metricLine(m, "walbox_heartbeat_lag_seconds") != "walbox_heartbeat_lag_seconds 0" {
		t.Errorf("a standby emits no heartbeat, yet %q", metricLine(m, "walbox_heartbeat_lag_seconds"))
	}
	if c, _ := b.get("/healthz"); c != http.StatusOK {
		t.Errorf("standby /healthz = %d, want 200", c)
	}
	// Several retries later, and past --slot-busy-timeout: still waiting,
	// logged once, no reconnects counted.
	time.Sleep(2500 * time.Millisecond) // the behaviour under test is the passing of time
	select {
	case err := <-b.done:
		t.Fatalf("standby stopped while the slot was busy: %v", err)
	default:
	}
	if n := b.logs.Count("standby: the slot is in use"); n != 1 {
		t.Errorf("standby logged %d times, want once:\n%s", n, b.logs.Tail(3000))
	}
	if _, m := b.get("/metrics"); metricLine(m, "walbox_postgres_reconnects_total") != "walbox_postgres_reconnects_total 0" {
		t.Errorf("standby retries counted as reconnects: %q", metricLine(m, "walbox_postgres_reconnects_total"))
	}

	e.insert(t, "order", 2, 1)
	a.stop(t)
	start := time.Now()
	waitFor(t, "the standby to take over", func() bool { c, _ := b.get("/readyz"); return c == 200 })
	t.Logf("takeover after a clean stop: %s", time.Since(start).Round(time.Millisecond))
	if !strings.Contains(b.logs.String(), "standby: took over the slot") {
		t.Errorf("takeover not logged:\n%s", b.logs.Tail(3000))
	}
	if _, m := b.get("/metrics"); metricLine(m, "walbox_standby") != "walbox_standby 0" {
		t.Errorf("after takeover: %q", metricLine(m, "walbox_standby"))
	}
	e.insert(t, "order", 2, 2)
	if got := e.consume(t, "order", 2); len(got) != 2 {
		t.Errorf("got %d records, want 2", len(got))
	}
}

// TestRunSlotBusyTimeoutWithoutStandby keeps the single-instance behaviour:
// without --standby a busy slot stops walbox after --slot-busy-timeout,
// naming --standby among the fixes.
func TestRunSlotBusyTimeoutWithoutStandby(t *testing.T) {
	e := newTableEnv(t)
	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.HeartbeatInterval = 0
	a := startInstance(t, cfg)
	waitFor(t, "the first instance to be ready", func() bool { c, _ := a.get("/readyz"); return c == 200 })

	cfg.SlotBusyTimeout = 300 * time.Millisecond
	cfg.MetricsAddr = ""
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := runRelay(ctx, cfg, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "in use by another process") || !strings.Contains(err.Error(), "--standby") {
		t.Fatalf("second instance without --standby = %v, want the slot-busy error naming --standby", err)
	}
}

// TestRunStandbySilentLoss: the active instance's replication connection
// is cut without FIN or RST (a blackhole between it and Postgres, as when
// its host vanishes). The server frees the slot when wal_sender_timeout (3s
// here) passes without a reply, and the standby takes over within that
// plus its retry interval (1s).
func TestRunStandbySilentLoss(t *testing.T) {
	parallel(t)
	const walSenderTimeout = 3 * time.Second
	srv := pgtest.Start(t, func(o *pgtest.Options) {
		o.Settings = map[string]string{"wal_sender_timeout": "3s"}
	})
	db := pgtest.NewDatabase(t, srv)
	e := &setupEnv{logs: &logbuf.Buffer{}}
	conn, err := pgx.Connect(ctxT(t), srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	e.conn = conn
	e.migrate(t, "001_outbox.sql")
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)

	cfg := config.Defaults()
	cfg.PGDSN = srv.DSN(db)
	cfg.KafkaBrokers = cluster.ListenAddrs()
	cfg.LogFormat = "text"
	cfg.Standby = true
	cfg.HeartbeatInterval = 0
	cfg.ReconnectBackoffMin, cfg.ReconnectBackoffMax = 50*time.Millisecond, 200*time.Millisecond

	u, err := url.Parse(cfg.PGDSN)
	if err != nil {
		t.Fatal(err)
	}
	proxy := faultproxy.New(t, u.Host)
	acfg := cfg
	acfg.PGDSN = strings.Replace(cfg.PGDSN, u.Host, proxy.Addr(), 1)
	a := startInstance(t, acfg)
	waitFor(t, "the first instance to be ready", func() bool { c, _ := a.get("/readyz"); return c == 200 })
	b := startInstance(t, cfg)
	waitFor(t, "the second instance to stand by", func() bool { return strings.Contains(b.logs.String(), "standby: the slot is in use") })

	proxy.Blackhole()
	cut := time.Now()
	deadline := cut.Add(walSenderTimeout + 10*time.Second)
	for !strings.Contains(b.logs.String(), "standby: took over the slot") {
		if time.Now().After(deadline) {
			t.Fatalf("no takeover within %s of the cut:\n%s", deadline.Sub(cut), b.logs.Tail(3000))
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	took := time.Since(cut)
	t.Logf("takeover after a silent loss of the active instance: %s (wal_sender_timeout %s, retry 1s)", took.Round(time.Millisecond), walSenderTimeout)
	if took > walSenderTimeout+time.Second+2*time.Second {
		t.Errorf("takeover took %s, want about wal_sender_timeout + 1s", took)
	}
	// The partition heals after outlasting both sides' patience: the old
	// active instance finds the slot taken and stands by in its turn.
	proxy.CloseAll()
	proxy.Restore()
	waitFor(t, "the old active instance to stand by", func() bool {
		_, m := a.get("/metrics")
		return metricLine(m, "walbox_standby") == "walbox_standby 1"
	})
}
