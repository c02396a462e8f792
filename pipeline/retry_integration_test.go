package pipeline_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// TestRelayRetriesFastWhileThePrimaryIsDown: after a session that streamed
// is lost (the primary crashed), the relay reconnects at the floor of the
// backoff instead of doubling the delay, so the first event of a primary
// promoted tens of seconds later is not held back by a backoff that grew
// meanwhile (with Patroni it resumed up to 15.4 s after the new primary
// accepted writes). The test checks the delays the relay chose, not how
// long anything took. Before the fix the sixth retry was announced with
// retry_in=16s.
func TestRelayRetriesFastWhileThePrimaryIsDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
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
	conn.Close(ctx)
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	logs := &logbuf.Buffer{}
	var out io.Writer = logs
	if testing.Verbose() {
		out = io.MultiWriter(logs, os.Stderr)
	}
	// Debug: a repeated failure is logged as a warning once per 30 s.
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	limits := pipeline.NewKafkaTopicLimits()
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: cluster.ListenAddrs(), TopicLimits: limits}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const floor = 500 * time.Millisecond
	relay, err := pipeline.New(pipeline.Config{
		ConnString: srv.DSN("postgres") + "&connect_timeout=2", Slot: "walbox", Publication: "walbox",
		StatusInterval: 200 * time.Millisecond, TopicLimits: limits,
		BackoffMin: floor, BackoffMax: 30 * time.Second,
	}, kcl, rt, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx, pglogrepl.LSN(slot.ConfirmedFlushLSN)) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	waitFor(t, time.Minute, "the relay to stream", relay.Streaming)

	if err := srv.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	const retries = 6
	retryIn := regexp.MustCompile(`msg="replication session ended, reconnecting".* retry_in=(\S+)`)
	deadline := time.Now().Add(90 * time.Second)
	for len(retryIn.FindAllStringSubmatch(logs.String(), -1)) < retries && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
	got := retryIn.FindAllStringSubmatch(logs.String(), -1)
	if len(got) < retries {
		t.Fatalf("%d reconnect attempts logged within 90 s of the crash, want %d:\n%s", len(got), retries, logs.Tail(4000))
	}
	for i, m := range got[:retries] {
		d, err := time.ParseDuration(m[1])
		if err != nil {
			t.Fatalf("retry_in=%q: %v", m[1], err)
		}
		if d > floor {
			t.Fatalf("reconnect attempt %d after the lost session waits %s, want at most --reconnect-backoff-min (%s) within %s of the loss:\n%s",
				i+1, d, floor, pipeline.FastRetryWindow, logs.Tail(4000))
		}
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the relay to stream again", relay.Streaming)
}

// TestRelayAgainstAStandbyLogsOnce: walbox pointed by mistake at a standby
// (target_session_attrs=read-write: "read only connection") retries at the
// floor of the backoff for up to NotPrimaryRetryWindow, 10 minutes, about
// 1,600 attempts at 500 ms jittered. The same failure is logged as a
// warning once per 30 s, not once per attempt (the other attempts are at
// debug level).
//
// How it broke: one warning per attempt, about 1,600 lines in 10 minutes.
func TestRelayAgainstAStandbyLogsOnce(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := pgtest.Start(t)
	standby := pgtest.Standby(t, primary, pgtest.StandbyOptions{})
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	reg := prometheus.NewRegistry()
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: cluster.ListenAddrs()}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	relay, err := pipeline.New(pipeline.Config{
		ConnString: standby.DSN("postgres") + "&target_session_attrs=read-write", Slot: "walbox", Publication: "walbox",
		StatusInterval: 200 * time.Millisecond, BackoffMin: 500 * time.Millisecond, BackoffMax: 30 * time.Second,
	}, kcl, rt, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx, 0) }()
	attempt := regexp.MustCompile(`level=(\w+) msg="replication session ended, reconnecting"`)
	const attempts = 8
	deadline := time.Now().Add(90 * time.Second)
	for len(attempt.FindAllString(logs.String(), -1)) < attempts && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("relay: %v", err)
	}
	got := attempt.FindAllStringSubmatch(logs.String(), -1)
	if len(got) < attempts {
		t.Fatalf("%d reconnect attempts logged within 90 s, want %d:\n%s", len(got), attempts, logs.Tail(4000))
	}
	if !strings.Contains(logs.String(), "read only connection") {
		t.Fatalf("the attempts do not say the server is read-only:\n%s", logs.Tail(4000))
	}
	warns := 0
	for _, m := range got {
		if m[1] == "WARN" {
			warns++
		}
	}
	// Eight attempts at most 500 ms apart are within 30 s, unless the
	// machine is very slow: at most two warnings.
	if warns > 2 {
		t.Fatalf("%d of %d attempts against the standby logged a warning, want the repeated failure logged once per 30 s:\n%s", warns, len(got), logs.Tail(3000))
	}
}
