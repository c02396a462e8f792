package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
)

// brokerFreeze is longer than walbox's default transaction timeout (1m):
// the broker aborts the Kafka transaction that was open when it froze.
const brokerFreeze = 75 * time.Second

// TestExactlyOnceSurvivesAFrozenBroker freezes the Kafka broker's JVM
// (SIGSTOP) for 75 s while walbox streams in exactly-once mode with its
// default transaction timeout, under a writer committing continuously.
// The Kafka transaction open at the freeze outlives the timeout; after
// SIGCONT the broker aborts it and bumps the epoch. The same walbox process
// (no restart) must take that for a timeout, not a fence, restart its
// session from the committed position and stream again: every event
// delivered, 0 duplicates for a read_committed consumer, the slot held
// while the broker was frozen.
func TestExactlyOnceSurvivesAFrozenBroker(t *testing.T) {
	fulltest.Require(t, "a real broker frozen for 75 s in exactly-once mode")
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	kproxy, err := faultproxy.StartListener()
	if err != nil {
		t.Fatal(err)
	}
	defer kproxy.Close()
	broker := kafkatest.Start(t, func(o *kafkatest.Options) {
		o.Advertise = func(addr string) string {
			if err := kproxy.SetTarget(addr); err != nil {
				t.Errorf("kafka proxy target: %v", err)
			}
			return kproxy.Addr()
		}
	},
		// The broker looks for timed-out transactions every 10 s by
		// default: after the resume, walbox's pending commit usually
		// wins that race and the transaction commits. Looking every
		// 500 ms makes the abort (and walbox's recovery from it) the
		// likely outcome; either must pass.
		kafkatest.WithProperty("transaction.abort.timed.out.transaction.cleanup.interval.ms", "500"))
	broker.RequireFaults(t)
	const name = "frozen-75s-eos"
	e := newFaultEnv(ctx, t, broker, kproxy, name, eosEnv("walbox-state."+name, 0)...)
	e.exactlyOnce = true
	first := e.walbox
	e.flowing(300)
	if err := broker.Pause(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // the freeze's length, not synchronisation: acks on their way land
	held := e.confirmedLSN()
	time.Sleep(brokerFreeze - 5*time.Second) // the rest of the freeze
	after := e.confirmedLSN()
	alive := !e.walbox.exited()
	if err := broker.Resume(); err != nil {
		t.Fatal(err)
	}
	if !alive {
		t.Fatalf("walbox exited while the broker was frozen: %v\n%s", e.walbox.err, tail(e.walbox.stderr.String(), 4000))
	}
	if after != held {
		t.Errorf("slot confirmed %s -> %s while the broker was frozen", held, after)
	}
	resumed := time.Now()
	e.flowing(300) // streaming again, in the same process
	streamingAgain := time.Since(resumed)
	row := e.finish(fmt.Sprintf("kafka frozen %s (exactly-once)", brokerFreeze), e.caughtUp(), fmt.Sprintf("slot held at %s", held))
	if e.walbox != first || e.walbox.exited() {
		t.Fatalf("walbox did not go on in the same process: %v", e.walbox.err)
	}
	log := e.walbox.stderr.String()
	t.Logf("report: %v; streaming again %s after the resume; kafka transaction timeouts logged: %d; fenced: %v",
		row.report, streamingAgain.Round(10*time.Millisecond), strings.Count(log, "kafka transaction timed out"),
		strings.Contains(log, "kafka producer fenced"))
	if strings.Contains(log, "kafka producer fenced") {
		t.Errorf("walbox reported fencing for a timeout abort:\n%s", tail(log, 4000))
	}
	printFaultReport(t, []faultRow{row})
}
