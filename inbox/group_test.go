package inbox_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
)

// TestGroupRebalance: the documented consumer loop (a poll per
// ProcessBatch, CommitRecords after it) on a real franz-go group: member A
// applies part of the topic, member B joins (a rebalance that can hand B
// partitions whose polled records A is still applying), then A dies in
// the middle of a batch without committing anything. B ends up with every
// partition, re-reads what A had not committed and applies every event
// exactly once, duplicates in the topic (at-least-once walbox) included.
func TestGroupRebalance(t *testing.T) {
	parallel(t)
	const topic, partitions, events, dups = "outbox.event.account", 4, 400, 60
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	seeds := cluster.ListenAddrs()

	prod, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	var recs []*kgo.Record
	for i := range events + dups {
		id := fmt.Sprintf("e-%d", i%events) // the last dups are copies
		recs = append(recs, &kgo.Record{Topic: topic, Value: []byte(id), Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}}})
	}
	last := map[int32]int64{}
	for _, r := range prod.ProduceSync(ctx(t), recs...) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		last[r.Record.Partition] = max(last[r.Record.Partition], r.Record.Offset)
	}

	e := newEnv(t, inbox.Config{Consumer: "billing"})
	// member runs the documented loop until ctx ends or die says so in a
	// handler (the process dies mid-batch: nothing of it commits).
	type member struct {
		cl      *kgo.Client
		seen    sync.Map // partition -> highest offset committed to Kafka
		batches atomic.Int64
	}
	start := func(die func(m *member) bool) (*member, chan error) {
		cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics(topic),
			kgo.DisableAutoCommit())
		if err != nil {
			t.Fatal(err)
		}
		conn := connect(t, e.dsn)
		m := &member{cl: cl}
		done := make(chan error, 1)
		go func() {
			done <- func() error {
				for {
					fetches := cl.PollRecords(context.Background(), 15) // small polls: many batches
					if fetches.IsClientClosed() {
						return nil
					}
					if err := fetches.Err0(); err != nil {
						return err
					}
					polled := fetches.Records()
					died := false
					_, err := e.ib.ProcessBatch(context.Background(), conn, polled, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
						if die != nil && die(m) {
							died = true
							return fmt.Errorf("killed")
						}
						return depositEach(ctx, tx, rec)
					})
					if died {
						cl.Close() // no commit: the offsets stay where they were
						return nil
					}
					if err != nil {
						return err
					}
					if err := cl.CommitRecords(context.Background(), polled...); err != nil {
						// A commit refused in a rebalance: the records come
						// again to whoever owns them, and the inbox skips them.
						t.Logf("commit after a batch: %v", err)
						continue
					}
					for _, r := range polled {
						if prev, ok := m.seen.Load(r.Partition); !ok || prev.(int64) < r.Offset {
							m.seen.Store(r.Partition, r.Offset)
						}
					}
					m.batches.Add(1)
				}
			}()
		}()
		return m, done
	}

	// A's sixth batch freezes, holding its uncommitted rows, until B has
	// joined and committed three batches (or, if the rebalance handed B the
	// very records A holds, so that B waits on A's rows, for five seconds),
	// and then A dies.
	var joined atomic.Pointer[member]
	a, doneA := start(func(a *member) bool {
		if a.batches.Load() < 6 {
			return false
		}
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
			if b := joined.Load(); b != nil && b.batches.Load() >= 3 {
				break
			}
		}
		return true
	})
	waitFor(t, "member A to apply a few batches", func() bool { return a.batches.Load() >= 5 })
	b, doneB := start(nil)
	joined.Store(b)
	select {
	case err := <-doneA:
		if err != nil {
			t.Fatalf("member A: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("member A never reached its sixth batch")
	}
	defer b.cl.Close()
	waitFor(t, "member B to commit every partition to its end", func() bool {
		for p, off := range last {
			got, ok := b.seen.Load(p)
			if !ok || got.(int64) < off {
				return false
			}
		}
		return true
	})
	b.cl.Close()
	if err := <-doneB; err != nil {
		t.Fatalf("member B: %v", err)
	}
	t.Logf("member A committed %d batches before it died, member B %d", a.batches.Load(), b.batches.Load())
	conn := connect(t, e.dsn)
	if balance, calls := account(t, conn); balance != events || calls != events {
		t.Fatalf("balance %d after %d handler commits, want %d after %d: every event exactly once", balance, calls, events, events)
	}
	if n := inboxRows(t, conn, "walbox_inbox", "billing"); n != events {
		t.Fatalf("%d inbox rows, want %d", n, events)
	}
}
