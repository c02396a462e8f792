package e2e

import (
	"context"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
)

const (
	streamingLine = `"msg":"streaming"`
	standbyLine   = `standby: the slot is in use by another process`
)

// TestStandbyTakeoverUnderLoad runs two `walbox run --standby` on one slot
// and SIGKILLs the active one repeatedly while events flow, starting a new
// standby each time so two always run. Nothing is lost, per-key order is
// kept, and the takeover time (SIGKILL to the standby logging
// "streaming") is reported.
func TestStandbyTakeoverUnderLoad(t *testing.T) {
	parallel(t)
	runStandbyTakeover(t, kfakeBrokers(t))
}

// TestStandbyTakeoverRealKafka is the same against the real broker, whose
// acks and idempotent producer sessions are what the delivery guarantee
// rests on.
func TestStandbyTakeoverRealKafka(t *testing.T) {
	parallel(t)
	broker := kafkatest.Start(t)
	runStandbyTakeover(t, broker.Addrs())
}

func runStandbyTakeover(t *testing.T, brokers []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, brokers)
	env := append(slices.Clone(f.env), "WALBOX_STANDBY=true", "WALBOX_HEARTBEAT_INTERVAL=500ms")
	const kills = 5
	// Every 10th transaction streams, so takeovers also find one in flight.
	w := startWriter(ctx, t, f.pg.DSN("postgres"), 13, 50, 40, 200_000, 20*time.Millisecond, withLargeTxns(10))
	col := startCollector(ctx, t, f.brokers)

	active := startWalbox(t, env)
	waitUntil(ctx, t, time.Minute, "the first instance to stream", func() bool {
		return strings.Contains(active.stderr.String(), streamingLine)
	})
	var takeovers []time.Duration
	for k := 1; k <= kills; k++ {
		standby := startWalbox(t, env)
		waitUntil(ctx, t, time.Minute, "the new instance to stand by", func() bool {
			if standby.exited() {
				t.Fatalf("standby exited: %v", standby.err)
			}
			return strings.Contains(standby.stderr.String(), standbyLine)
		})
		target := col.distinct() + 300
		waitUntil(ctx, t, time.Minute, "progress before kill", func() bool {
			if active.exited() {
				t.Fatalf("active walbox exited on its own: %v", active.err)
			}
			return col.distinct() >= target
		})
		active.kill()
		killed := time.Now()
		waitUntil(ctx, t, time.Minute, "the standby to take over", func() bool {
			return strings.Contains(standby.stderr.String(), streamingLine)
		})
		took := time.Since(killed)
		takeovers = append(takeovers, took)
		t.Logf("kill %d: takeover after %s; %d distinct events consumed; slot %s", k, took.Round(time.Millisecond), col.distinct(), f.slotPosition(t))
		if !strings.Contains(standby.stderr.String(), "standby: took over the slot") {
			t.Errorf("kill %d: the takeover was not logged", k)
		}
		active = standby
	}
	target := col.distinct() + 300
	waitUntil(ctx, t, time.Minute, "progress after the last takeover", func() bool { return col.distinct() >= target })
	w.halt()
	written, err := w.snapshot()
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitUntil(ctx, t, 2*time.Minute, "every event to be delivered", func() bool { return col.distinct() >= len(written) })
	rep := outboxtest.Check(written, col.snapshot())
	slices.Sort(takeovers)
	t.Logf("after %d SIGKILLs of the active instance: %v; takeover times sorted %v (max %s)", kills, rep, takeovers, takeovers[len(takeovers)-1])
	if !rep.OK() || rep.Delivered != len(written) {
		t.Fatalf("standby takeover test failed: %v", rep)
	}
	t.Logf("%d transactions streamed", requireStreamed(ctx, t, f.pg.DSN("postgres"), "walbox"))
	if code := active.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox exit code %d after SIGTERM, want 0", code)
	}
}
