package pipeline_test

import (
	"context"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/pipeline"
)

// TestRelayCountsOnlyDeliveredEventsAsErased: a lossy failover while Kafka
// accepts nothing. walbox counted the records it had handed to the
// producer: the 160 events of the transactions the standby lacks were
// reported "already sent to Kafka" although the lost-session flush purged
// them (at least once) or their Kafka transaction never committed (exactly
// once), and no consumer ever saw them. Now only records Kafka acknowledged
// (committed, exactly once) count.
func TestRelayCountsOnlyDeliveredEventsAsErased(t *testing.T) {
	fulltest.Require(t, "a lossy failover per delivery mode, about 8 s each")
	v := failoverVersions(t)[0]
	for _, eos := range []bool{false, true} {
		name := "at-least-once"
		if eos {
			name = "exactly-once"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p := startFailoverPair(t, ctx, v, failoverCase{eos: eos, lostFlush: time.Second})
			d := newDelivery(t, ctx, p.brokers)
			d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
			d.readAll("consume the shared history")
			pos := currentLSN(t, ctx, p.conn)
			waitFor(t, 30*time.Second, "walbox to confirm the shared history", func() bool {
				c, _ := walboxSlot(t, ctx, p.primary)
				return c >= pos
			})
			waitFor(t, 60*time.Second, "the standby to synchronize the slot", func() bool {
				if _, err := p.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
					t.Fatal(err)
				}
				c, ok := walboxSlot(t, ctx, p.standby)
				return ok && c >= pos
			})

			// Kafka refuses every produce request (a retriable error, so
			// the records stay buffered), or, exactly once, every commit
			// (the records are acknowledged, their Kafka transactions
			// aborted and produced again); the standby is cut off.
			var refused atomic.Int64
			var blocked atomic.Bool
			blocked.Store(true)
			if !eos {
				p.cluster.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
					p.cluster.KeepControl()
					if !blocked.Load() {
						return nil, nil, false
					}
					preq := req.(*kmsg.ProduceRequest)
					resp := preq.ResponseKind().(*kmsg.ProduceResponse)
					for _, rt := range preq.Topics {
						st := kmsg.NewProduceResponseTopic()
						st.Topic = rt.Topic
						for _, rp := range rt.Partitions {
							sp := kmsg.NewProduceResponseTopicPartition()
							sp.Partition = rp.Partition
							sp.ErrorCode = kerr.NotEnoughReplicas.Code
							st.Partitions = append(st.Partitions, sp)
						}
						resp.Topics = append(resp.Topics, st)
					}
					refused.Add(1)
					return resp, nil, true
				})
			} else {
				p.cluster.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
					p.cluster.KeepControl()
					ereq := req.(*kmsg.EndTxnRequest)
					if !blocked.Load() || !ereq.Commit {
						return nil, nil, false
					}
					resp := ereq.ResponseKind().(*kmsg.EndTxnResponse)
					resp.ErrorCode = kerr.InvalidTxnState.Code
					refused.Add(1)
					return resp, nil, true
				})
			}
			p.link.Drop()
			lost := d.write(p.conn, 40, 4)
			pos = currentLSN(t, ctx, p.conn)
			waitFor(t, 30*time.Second, "walbox to receive what the standby lacks, and Kafka to refuse it", func() bool {
				return metricValue(t, p.reg, "walbox_received_lsn_bytes") >= float64(pos) && refused.Load() > 1
			})

			// The primary crashes; the standby is promoted.
			if err := p.primary.StopImmediate(ctx); err != nil {
				t.Fatal(err)
			}
			if err := p.standby.Promote(ctx); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "the session on the old primary to end", func() bool { return !p.relay.Streaming() })
			if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.standby.Port()))); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 60*time.Second, "walbox to stream from the new primary", p.relay.Streaming)
			blocked.Store(false)
			p.conn.Close(ctx)
			conn, err := pgx.Connect(ctx, p.standby.DSN("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			p.conn = conn
			d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
			d.readAll("consume on the new primary")
			d.check("after the failover", eos)
			ids := map[string]bool{}
			for _, r := range d.got {
				ids[r.Headers["event_id"]] = true
			}
			for _, e := range lost {
				if ids[e.ID] {
					t.Fatalf("event %s, which Kafka refused and the new primary lacks, was delivered", e.ID)
				}
			}
			if n := metricValue(t, p.reg, "walbox_failover_erased_events_total"); n != 0 {
				t.Errorf("walbox_failover_erased_events_total = %v, want 0: none of the %d events the new primary lacks reached a consumer", n, len(lost))
			}
		})
	}
}

// TestExactlyOnceStandbyPairAcrossALossyFailover: instances A and B run
// exactly once with --standby on one slot. A streams the old primary and
// commits transactions the standby never receives (timeline 1); the
// primary crashes, the standby is promoted, B reaches it first and commits
// new transactions on timeline 2 at lower LSNs; then A takes the slot back.
// A's own last commit on timeline 1 overrode B's position in the state
// topic (LSNs compared without timelines) and A produced B's transactions
// again: read_committed consumers saw a1 a2 n1 n2 n1 n2 n3. Now positions
// are compared within a history only.
func TestExactlyOnceStandbyPairAcrossALossyFailover(t *testing.T) {
	parallel(t)
	v := failoverVersions(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startFailoverPair(t, ctx, v, failoverCase{eos: true, standby: true})
	waitFor(t, 30*time.Second, "A to stream", p.relay.Streaming)
	a := *p
	primaryAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(p.primary.Port()))
	p.endpoint = faultproxy.New(t, primaryAddr)
	// B freezes once it has committed its first Kafka transaction on the
	// new primary, before it confirms the slot.
	var freezeB atomic.Bool
	frozen, thaw := make(chan struct{}), make(chan struct{})
	var once sync.Once
	p.fc.txnPhase = func(phase string) {
		if phase == pipeline.PhaseCommitted && freezeB.Load() {
			freezeB.Store(false)
			close(frozen)
			<-thaw
		}
	}
	p.startRelay(t, 0)
	// After startRelay's cleanup, so before it: B must thaw to stop.
	t.Cleanup(func() { once.Do(func() { close(thaw) }) })
	b := *p
	waitFor(t, 30*time.Second, "B to stand by", b.relay.Standby)
	d := newDelivery(t, ctx, p.brokers)

	d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
	d.readAll("consume the shared history")
	pos := currentLSN(t, ctx, p.conn)
	waitFor(t, 30*time.Second, "A to confirm the shared history", func() bool {
		c, _ := walboxSlot(t, ctx, p.primary)
		return c >= pos
	})
	waitFor(t, 60*time.Second, "the standby to synchronize the slot", func() bool {
		if _, err := p.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		c, ok := walboxSlot(t, ctx, p.standby)
		return ok && c >= pos
	})
	if !b.relay.Standby() || a.relay.Standby() {
		t.Fatalf("A standing by %v, B %v: want A streaming and B standing by", a.relay.Standby(), b.relay.Standby())
	}

	// A commits what the standby never receives.
	p.link.Drop()
	d.erased = append(d.erased, d.write(p.conn, 40, 4)...)
	d.readAll("consume what the standby lacks")
	pos = currentLSN(t, ctx, p.conn)
	waitFor(t, 30*time.Second, "A to confirm what the standby lacks", func() bool {
		c, _ := walboxSlot(t, ctx, p.primary)
		return c >= pos
	})
	onOld := a.relay.Confirmed()

	// Crash and promotion; only B reaches the new primary.
	if err := p.primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.standby.Port()))); err != nil {
		t.Fatal(err)
	}
	p.conn.Close(ctx)
	conn, err := pgx.Connect(ctx, p.standby.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	p.conn = conn
	waitFor(t, 30*time.Second, "B to stream from the new primary", b.relay.Streaming)
	freezeB.Store(true)
	d.kept = append(d.kept, d.write(p.conn, 2, 4)...)
	d.readAll("consume B's transactions on the new primary")
	<-frozen
	onNew := currentLSN(t, ctx, p.conn)
	t.Logf("A committed up to %s on timeline 1; B committed below %s on timeline 2 and froze before confirming", onOld, onNew)
	if onNew >= onOld {
		t.Fatalf("B's position %s on timeline 2 is not below A's %s on timeline 1: the test does not test", onNew, onOld)
	}
	// B's connection goes: its walsender ends, the slot is free.
	b.endpoint.Drop()

	// A takes the slot back.
	if err := a.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.standby.Port()))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 60*time.Second, "A to stream from the new primary", a.relay.Streaming)
	d.kept = append(d.kept, d.write(p.conn, 2, 4)...)
	d.readAll("consume A's transactions on the new primary")
	// Anything produced again would arrive with or before the last ones.
	d.check("after A took the slot back", true)
}
