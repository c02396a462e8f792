package pipeline_test

import (
	"context"
	"log/slog"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// onLog is a slog handler that runs hook when a record's message contains
// match: a way to act at an exact point of the relay's start.
type onLog struct {
	slog.Handler
	match string
	hook  func()
}

func (onLog) Enabled(context.Context, slog.Level) bool { return true }

func (h onLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.hook()
	}
	return nil
}

// TestRelayStopDuringStartIsClean: a stop (SIGTERM) that arrives while the
// session is connecting and starting replication is a clean stop, not a
// fatal error. It used to fail with "start replication ...: context
// canceled" and exit 1 (seen in e2e, SIGTERM right after "slot ready").
// Here the replication connection goes through a proxy that, from the
// moment the relay logs the raised receive timeout (after connecting,
// before START_REPLICATION), delays every byte by 500ms; the context is
// cancelled once START_REPLICATION has reached the server, so while the
// relay waits for the server's answer.
func TestRelayStopDuringStartIsClean(t *testing.T) {
	ctx := context.Background()
	e := newSlotEnv(t)
	srv, slot := e.srv, e.slot
	proxy := faultproxy.New(t, hostPort(srv.DSN("postgres")))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var stopper sync.WaitGroup
	defer stopper.Wait()
	log := slog.New(onLog{Handler: slog.DiscardHandler, match: "raising the receive timeout", hook: func() {
		sent := proxy.Stats().ClientToTarget
		proxy.SetLatency(500 * time.Millisecond)
		stopper.Add(1)
		go func() {
			defer stopper.Done()
			deadline := time.Now().Add(30 * time.Second)
			for proxy.Stats().ClientToTarget == sent && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond) // polling the proxy's counter
			}
			cancel()
		}()
	}})
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: e.brokers}, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	// The server's wal_sender_timeout (60s) is above 1s, so the relay logs
	// that it raises the timeout: after connecting, before starting.
	relay, err := pipeline.New(pipeline.Config{
		ConnString: strings.Replace(srv.DSN("postgres"), hostPort(srv.DSN("postgres")), proxy.Addr(), 1), Slot: "walbox", Publication: "walbox", ReceiveTimeout: time.Second,
	}, kcl, rt, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Run(rctx, slot); err != nil {
		t.Fatalf("Run after a stop during start = %v, want nil (a clean stop)", err)
	}
	if rctx.Err() == nil {
		t.Fatal("the hook never fired: the relay did not log the raised receive timeout")
	}
}

// hostPort returns the host:port of a postgres:// URL.
func hostPort(dsn string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(err)
	}
	return u.Host
}

// TestRelayGracefulStopLeavesSlotAtFinalPosition: after a clean stop, the
// slot's confirmed_flush_lsn is the position the relay last confirmed, at
// once. The final status update used to be followed by a plain close: a
// walsender busy sending could fail on the closed socket and exit before
// reading it, so the next start began from an older position and sent
// again what Kafka had acknowledged (e2e TestGracefulStopThenRestart...
// saw 165-203 duplicates in about one run of six under load). Writers keep
// the walsender sending while each of several relays stops.
func TestRelayGracefulStopLeavesSlotAtFinalPosition(t *testing.T) {
	parallel(t)
	ctx, cancelAll := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancelAll()
	e := newSlotEnv(t)
	srv, conn := e.srv, e.conn

	// The writer: 200-row transactions until the test ends.
	wctx, stopWriter := context.WithCancel(ctx)
	var writer sync.WaitGroup
	writer.Add(1)
	go func() {
		defer writer.Done()
		wconn, err := pgx.Connect(wctx, srv.DSN("postgres"))
		if err != nil {
			return
		}
		defer wconn.Close(context.Background())
		for wctx.Err() == nil {
			_, _ = wconn.Exec(wctx, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
				SELECT 'order', (g % 50)::text, 'OrderCreated', '{"n": 1}' FROM generate_series(1, 200) g`)
		}
	}()
	defer func() { stopWriter(); writer.Wait() }()

	slotLSN := func() pglogrepl.LSN {
		var s string
		if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'walbox'").Scan(&s); err != nil {
			t.Fatal(err)
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			t.Fatal(err)
		}
		return lsn
	}
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	for round := range 5 {
		start := slotLSN()
		kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: e.brokers, MaxBufferedRecords: 10001}, slog.New(slog.DiscardHandler), nil)
		if err != nil {
			t.Fatal(err)
		}
		relay, err := pipeline.New(pipeline.Config{
			ConnString: srv.DSN("postgres"), Slot: "walbox", Publication: "walbox", StatusInterval: 50 * time.Millisecond,
		}, kcl, rt, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(rctx, start) }()
		deadline := time.Now().Add(30 * time.Second)
		for relay.Confirmed() <= start && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond) // polling the relay's confirmed position
		}
		stop()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Run = %v", round, err)
		}
		kcl.Close()
		final := relay.Confirmed()
		if final <= start {
			t.Fatalf("round %d: the relay confirmed nothing past %s in 30s", round, start)
		}
		if got := slotLSN(); got < final {
			t.Fatalf("round %d: right after a clean stop the slot is at %s, behind the relay's final confirmed position %s: "+
				"the final status update was lost, and the next start sends again what Kafka acknowledged", round, got, final)
		}
	}
}

// slotEnv is a Postgres server with the outbox table, the publication and
// the slot "walbox", and a kfake cluster.
type slotEnv struct {
	srv     *pgtest.Server
	conn    *pgx.Conn
	brokers []string
	slot    pglogrepl.LSN // the slot's confirmed position when created
}

func newSlotEnv(t *testing.T) *slotEnv {
	t.Helper()
	ctx := context.Background()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	slot, err := slotctl.EnsureSlot(ctx, conn, scfg)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	return &slotEnv{srv: srv, conn: conn, brokers: cluster.ListenAddrs(), slot: slot.ConfirmedFlushLSN}
}
