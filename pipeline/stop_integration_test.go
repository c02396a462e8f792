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
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
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
	defer cluster.Close()

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
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: cluster.ListenAddrs()}, log, nil)
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
		ConnString: strings.Replace(srv.DSN("postgres"), hostPort(srv.DSN("postgres")), proxy.Addr(), 1), Slot: "walbox", Publication: "walbox", ReceiveTimeout: 1e9,
	}, kcl, rt, prometheus.NewRegistry(), log)
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Run(rctx, pglogrepl.LSN(slot.ConfirmedFlushLSN)); err != nil {
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
