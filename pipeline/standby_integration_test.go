package pipeline_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
)

// TestStandbyPollsWithoutAWalsender: a standby retrying every StandbyRetry
// used to open a walsender and be refused each time, two lines in the
// server log per retry (about 170,000 a day at the default second). It now
// checks pg_replication_slots.active first and opens a walsender only once
// the slot is free, then takes over.
func TestStandbyPollsWithoutAWalsender(t *testing.T) {
	e := startEnv(t, 200*time.Millisecond)
	waitFor(t, 30*time.Second, "the active relay to stream", e.relay.Streaming)

	kcl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Standby, cfg.StandbyRetry = true, 50*time.Millisecond
	standby, err := pipeline.New(cfg, kcl, rt, prometheus.NewRegistry(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- standby.Run(ctx, e.confirmedFlush(t)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("standby relay: %v", err)
		}
	})
	waitFor(t, 10*time.Second, "the second relay to stand by", standby.Standby)
	time.Sleep(time.Second) // some 20 retries

	b, err := os.ReadFile(e.srv.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "is active for PID"); n > 1 {
		t.Fatalf("the standby was refused %d times by a walsender in a second of retrying every 50ms; want at most the first", n)
	}

	e.cancel() // the active relay stops and frees the slot
	waitFor(t, 30*time.Second, "the standby to take over", standby.Streaming)
}
