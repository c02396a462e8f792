package pipeline_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/heartbeat"
	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
)

// TestHeartbeatShowsStall: with no business traffic, heartbeats come back
// through the slot and never reach Kafka; when the replication connection
// stalls (a blackhole between walbox and Postgres; the heartbeat's own
// connection is direct), walbox_heartbeat_lag_seconds passes the interval
// within two intervals and keeps growing, and walbox_slot_lag_bytes, read on
// the ordinary connection, shows the WAL piling up. After the partition
// heals, the lag falls back.
func TestHeartbeatShowsStall(t *testing.T) {
	const interval = 300 * time.Millisecond
	e := newSlotEnv(t)
	dsn := e.srv.DSN("postgres")
	proxy := faultproxy.New(t, hostPort(dsn))
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, nil))
	reg := prometheus.NewRegistry()

	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	var relay *pipeline.Relay
	mon, err := heartbeat.New(interval, "walbox", cc, func() bool { return relay.Streaming() }, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: e.brokers}, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	relay, err = pipeline.New(pipeline.Config{
		ConnString: strings.Replace(dsn, hostPort(dsn), proxy.Addr(), 1), Slot: "walbox", Publication: "walbox",
		Heartbeats: true, OnHeartbeat: mon.Seen,
	}, kcl, rt, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() {
		if err := relay.Run(ctx, e.slot); err != nil {
			t.Errorf("relay: %v", err)
		}
	})
	wg.Go(func() { _ = mon.Run(ctx) })

	gauge := func(name string) float64 {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name {
				m := mf.GetMetric()[0]
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
		t.Fatalf("no metric %s", name)
		return 0
	}
	poll := func(what string, within time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > within {
				t.Fatalf("%s: not within %s\n%s", what, within, logs.Tail(3000))
			}
			time.Sleep(10 * time.Millisecond) // polling interval
		}
		return time.Since(start)
	}

	poll("three heartbeats back through the slot", 30*time.Second, func() bool { return mon.Received() >= 3 })
	if lag := gauge("walbox_heartbeat_lag_seconds"); lag >= interval.Seconds() {
		t.Errorf("healthy heartbeat lag %.3fs, want below the interval", lag)
	}

	proxy.Blackhole()
	over := poll("heartbeat lag past one interval", 2*interval+time.Second, func() bool {
		return gauge("walbox_heartbeat_lag_seconds") > interval.Seconds()
	})
	past2 := poll("heartbeat lag past two intervals", 3*interval+time.Second, func() bool {
		return gauge("walbox_heartbeat_lag_seconds") > 2*interval.Seconds()
	})
	poll("slot lag read while the stream stalls", 5*time.Second, func() bool { return gauge("walbox_slot_lag_bytes") > 0 })
	t.Logf("stall: heartbeat lag passed %s after %s, 2x after %s (interval %s); slot lag %.0f bytes",
		interval, over.Round(time.Millisecond), past2.Round(time.Millisecond), interval, gauge("walbox_slot_lag_bytes"))

	proxy.Restore()
	received := mon.Received()
	poll("heartbeats back after the partition heals", 90*time.Second, func() bool {
		return mon.Received() > received+1 && gauge("walbox_heartbeat_lag_seconds") < interval.Seconds()
	})
	if got := gauge("walbox_events_produced_total"); got != 0 {
		// Counted once per record handed to Kafka.
		t.Errorf("walbox_events_produced_total = %v, want 0: heartbeats must never reach Kafka", got)
	}
}

// TestHeartbeatWithoutPrivilege: a role that may not execute
// pg_logical_emit_message gets one clear error line naming the heartbeat
// function's migration, the GRANT and --heartbeat-interval=0; the monitor keeps running and still reads the
// slot's lag.
func TestHeartbeatWithoutPrivilege(t *testing.T) {
	e := newSlotEnv(t)
	ctx := context.Background()
	for _, q := range []string{
		`CREATE ROLE hb_noemit LOGIN PASSWORD 'pw'`,
		`GRANT pg_monitor TO hb_noemit`,
		`DO $$ DECLARE f regprocedure; BEGIN
		   FOR f IN SELECT p.oid::regprocedure FROM pg_proc p WHERE p.proname = 'pg_logical_emit_message' LOOP
		     EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', f);
		   END LOOP; END $$`,
	} {
		if _, err := e.conn.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cc, err := pgx.ParseConfig(e.srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cc.User, cc.Password = "hb_noemit", "pw"
	logs := &logbuf.Buffer{}
	reg := prometheus.NewRegistry()
	mon, err := heartbeat.New(100*time.Millisecond, "walbox", cc, func() bool { return true }, reg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	wg.Go(func() { _ = mon.Run(rctx) })
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(logs.String(), "may not execute pg_logical_emit_message") {
		if time.Now().After(deadline) {
			t.Fatalf("no privilege error logged:\n%s", logs.Tail(3000))
		}
		time.Sleep(20 * time.Millisecond) // polling interval
	}
	time.Sleep(500 * time.Millisecond) // several more ticks: the error is logged once
	out := logs.String()
	if n := strings.Count(out, "may not execute"); n != 1 {
		t.Errorf("privilege error logged %d times, want once:\n%s", n, out)
	}
	for _, s := range []string{"level=ERROR", "005_heartbeat_function.sql", "GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean,text,text", "--heartbeat-interval=0", "user=hb_noemit"} {
		if !strings.Contains(out, s) {
			t.Errorf("log lacks %q:\n%s", s, out)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "walbox_slot_lag_bytes" && mf.GetMetric()[0].GetGauge().GetValue() < 0 {
			t.Errorf("slot lag not read without the emit privilege")
		}
	}
}
