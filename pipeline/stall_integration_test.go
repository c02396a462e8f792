package pipeline_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/pipeline"
)

// TestRelayNoticesStalledReplicationSocket: a replication connection that
// stops delivering while the server has more to send is given up within
// seconds, not after the receive timeout. The proxy between walbox and
// PostgreSQL stops forwarding the server's bytes on the open connection
// (faultproxy.StallOpen) while walbox's status updates still reach the
// server, which is what issue 29 saw after a Kafka broker crash: the
// walsender blocked in WalSenderWriteData with sent_lsn frozen, walbox's
// socket empty, and nothing but walbox's 60 s receive timeout to end it.
// The receive timeout here is 10 minutes, so only the stall watch can end
// the session before the test's deadline.
func TestRelayNoticesStalledReplicationSocket(t *testing.T) {
	fulltest.Require(t, "a stalled replication socket; the short run cuts the connection in e2e")
	var proxy *faultproxy.Proxy
	e := startEnvWith(t, time.Second, func(c *pipeline.Config) {
		proxy = faultproxy.New(t, hostPort(c.ConnString))
		c.ConnString = strings.Replace(c.ConnString, hostPort(c.ConnString), proxy.Addr(), 1)
		c.ReceiveTimeout = 10 * time.Minute
	})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	consumer, err := outboxtest.NewConsumer(e.brokers, "outbox\\.event\\..*")
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	gen := outboxtest.NewGenerator(7, 50)
	written := gen.Batch(10)
	if err := outboxtest.WriteTx(ctx, e.conn, written); err != nil {
		t.Fatal(err)
	}
	if _, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool {
		return outboxtest.DistinctIDs(got) >= len(written)
	}); err != nil {
		t.Fatalf("before the stall: %v", err)
	}

	proxy.StallOpen()
	stalled := time.Now()
	written = nil // the consumer reads on from the events above
	// Several MB of changes: more than the proxy and both sockets hold,
	// so the walsender blocks writing to the stalled connection.
	for range 20 {
		evs := gen.Batch(2000)
		if err := outboxtest.WriteTx(ctx, e.conn, evs); err != nil {
			t.Fatal(err)
		}
		written = append(written, evs...)
	}
	// Well below the 10-minute receive timeout; a session ended by the
	// stall watch delivers everything within seconds of the stall.
	dctx, dcancel := context.WithTimeout(ctx, 90*time.Second)
	defer dcancel()
	got, err := consumer.ReadUntil(dctx, func(got []outboxtest.Received) bool {
		return outboxtest.DistinctIDs(got) >= len(written)
	})
	rep := outboxtest.Check(written, got)
	if err != nil {
		t.Fatalf("after the stall: %v (report: %v); the stalled session was not given up", err, rep)
	}
	t.Logf("all %d events delivered %s after the stall began (report: %v)", len(written), time.Since(stalled).Round(time.Millisecond), rep)
	if !rep.OK() {
		t.Fatalf("delivery check failed: %v", rep)
	}
	if n := metricSum(t, e.reg, "walbox_replication_stalls_total"); n < 1 {
		t.Errorf("walbox_replication_stalls_total = %v, want at least 1", n)
	}
}
