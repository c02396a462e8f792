package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestEOSStandByAfterFenceDropsTheFencedCommit: a commit is running when
// another instance fences this one. The session ends as run does (the
// failure first: confirmBeforeFailing and endSession return at once when
// fenced, without waiting for the commit), the relay stands by
// (standByAfterFence), purges the lost session (flushLostSession) and
// takes the slot back. The commit left running
// belongs to the fenced client: the next session used to finish it on its
// first tick, take its "fenced" for a new fence, and stop again, though its
// own fresh producer id had fenced the other instance.
func TestEOSStandByAfterFenceDropsTheFencedCommit(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour, Standby: true}
	first := newEOSLoop(t, c, cfg, 1)
	if err := first.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	first.eos.full = true
	if err := first.tick(t); err != nil { // a1 committed
		t.Fatal(err)
	}
	_ = newEOSLoop(t, c, cfg, 1) // loads the producer id: fences the first

	// The next transaction's commit starts, and fails on the fence.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first.wal(t, pgBegin(0x2000, 0x2000))
	first.wal(t, pgInsert(outboxRel, "id-b1", "a", `{"n":"b1"}`))
	first.wal(t, pgCommit(0x2000))
	first.eos.full = true
	if err := first.eos.tick(ctx); err != nil {
		t.Fatal(err)
	}
	if first.eos.committing == nil {
		t.Fatal("no commit running")
	}
	for first.relay.failureErr() == nil && ctx.Err() == nil {
		select { // the promise of a refused record fences the relay
		case <-first.inflight.wake:
		case <-ctx.Done():
		}
	}
	ferr := first.relay.failureErr()
	if !errors.Is(ferr, ErrFenced) {
		t.Fatalf("relay failure %v, want ErrFenced", ferr)
	}
	// As run and session end a fenced session.
	first.confirmBeforeFailing(ferr)
	first.eos.endSession(ctx)
	if !first.relay.standByAfterFence(ferr) {
		t.Fatal("the relay does not stand by after the fence")
	}
	if _, err := first.relay.flushLostSession(ctx); err != nil {
		t.Fatal(err)
	}
	// As Run: the purged records' promises may report the fence again.
	if ferr := first.relay.failureErr(); ferr != nil && !first.relay.standByAfterFence(ferr) {
		t.Fatal(ferr)
	}
	// The slot is free again: the relay takes it back.
	if err := first.newSession(t); err != nil {
		t.Fatal(err)
	}
	if err := first.txn(t, 0x2000, "b1"); err != nil {
		t.Fatalf("first transaction after taking the slot back: %v", err)
	}
	first.eos.full = true
	if err := first.tick(t); err != nil {
		t.Fatalf("commit after taking the slot back: %v", err)
	}
	if err := first.relay.failureErr(); err != nil {
		t.Fatalf("the relay failed again after taking the slot back: %v", err)
	}
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1 b1" {
		t.Fatalf("read_committed saw %q, want a1 b1", got)
	}
}
