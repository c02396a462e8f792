package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
)

// TestDuplicatesAndReorders feeds 50 events, each delivered one to three
// times in a shuffled order, through Process, and then as polls of 16
// records applied in one transaction each (duplicates inside one
// transaction included): every event's effect happened exactly once, and
// applied is true exactly for the first delivery of each.
func TestDuplicatesAndReorders(t *testing.T) {
	for _, mode := range []string{"process", "batched handle"} {
		t.Run(mode, func(t *testing.T) {
			e := newEnv(t, inbox.Config{Consumer: "billing"})
			conn := connect(t, e.dsn)
			rng := rand.New(rand.NewPCG(11, uint64(len(mode))))
			const events = 50
			var deliveries []int
			var want int64
			for i := range events {
				want += int64(i + 1)
				for range 1 + rng.IntN(3) {
					deliveries = append(deliveries, i)
				}
			}
			rng.Shuffle(len(deliveries), func(a, b int) { deliveries[a], deliveries[b] = deliveries[b], deliveries[a] })

			seen := map[int]bool{}
			check := func(i int, applied bool) {
				t.Helper()
				if applied == seen[i] {
					t.Fatalf("event e-%d: applied = %v, but seen before = %v", i, applied, seen[i])
				}
				seen[i] = true
			}
			if mode == "process" {
				for off, i := range deliveries {
					applied, err := e.ib.Process(ctx(t), conn, record(fmt.Sprintf("e-%d", i), int64(off)), deposit(int64(i+1)))
					if err != nil {
						t.Fatal(err)
					}
					check(i, applied)
				}
			} else {
				for start := 0; start < len(deliveries); start += 16 {
					tx, err := conn.Begin(ctx(t))
					if err != nil {
						t.Fatal(err)
					}
					for off := start; off < min(start+16, len(deliveries)); off++ {
						i := deliveries[off]
						applied, err := e.ib.Handle(ctx(t), tx, record(fmt.Sprintf("e-%d", i), int64(off)), deposit(int64(i+1)))
						if err != nil {
							t.Fatal(err)
						}
						check(i, applied)
					}
					if err := tx.Commit(ctx(t)); err != nil {
						t.Fatal(err)
					}
				}
			}
			balance, applied := account(t, conn)
			if balance != want || applied != events {
				t.Fatalf("balance %d after %d handler calls; want %d after %d (%d deliveries)", balance, applied, want, events, len(deliveries))
			}
			if n := inboxRows(t, conn, "walbox_inbox", "billing"); n != events {
				t.Fatalf("%d inbox rows, want %d", n, events)
			}
		})
	}
}

// TestConsumersAreIndependent: two consumers sharing the table each apply
// the event once.
func TestConsumersAreIndependent(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)
	other, err := inbox.New(inbox.Config{Consumer: "shipping"})
	if err != nil {
		t.Fatal(err)
	}
	for _, ib := range []*inbox.Inbox{e.ib, other, e.ib, other} {
		if _, err := ib.Process(ctx(t), conn, record("e-1", 0), deposit(5)); err != nil {
			t.Fatal(err)
		}
	}
	if balance, applied := account(t, conn); balance != 10 || applied != 2 {
		t.Fatalf("balance %d after %d calls, want 10 after 2 (once per consumer)", balance, applied)
	}
}

// TestConcurrentSameEvent: two transactions handle the same event at once
// (a rebalance hands the partition over mid-record). The second waits on
// the first's inbox row; it applies the event only if the first rolled back.
func TestConcurrentSameEvent(t *testing.T) {
	for _, firstCommits := range []bool{true, false} {
		t.Run(fmt.Sprintf("first commits=%v", firstCommits), func(t *testing.T) {
			e := newEnv(t, inbox.Config{Consumer: "billing"})
			connA, connB, watch := connect(t, e.dsn), connect(t, e.dsn), connect(t, e.dsn)
			errFirst := errors.New("first handler fails")

			inside, release := make(chan struct{}), make(chan struct{})
			type result struct {
				applied bool
				err     error
			}
			first, second := make(chan result, 1), make(chan result, 1)
			go func() {
				applied, err := e.ib.Process(context.Background(), connA, record("e-1", 7), func(ctx context.Context, tx pgx.Tx) error {
					if err := deposit(10)(ctx, tx); err != nil {
						return err
					}
					close(inside)
					<-release
					if !firstCommits {
						return errFirst
					}
					return nil
				})
				first <- result{applied, err}
			}()
			<-inside
			var pidB uint32 = connB.PgConn().PID()
			go func() {
				applied, err := e.ib.Process(context.Background(), connB, record("e-1", 7), deposit(10))
				second <- result{applied, err}
			}()
			// Release the first only once the second is blocked on its row.
			waitFor(t, "the second transaction to wait on the first's inbox row", func() bool {
				var waiting bool
				err := watch.QueryRow(ctx(t), `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pidB).Scan(&waiting)
				return err == nil && waiting
			})
			close(release)
			r1, r2 := <-first, <-second
			if firstCommits {
				if r1.err != nil || !r1.applied || r2.err != nil || r2.applied {
					t.Fatalf("first (%v, %v), second (%v, %v); want the first applied and the second not", r1.applied, r1.err, r2.applied, r2.err)
				}
			} else {
				if !errors.Is(r1.err, errFirst) || r2.err != nil || !r2.applied {
					t.Fatalf("first (%v, %v), second (%v, %v); want the first failed and the second applied", r1.applied, r1.err, r2.applied, r2.err)
				}
			}
			if balance, applied := account(t, watch); balance != 10 || applied != 1 {
				t.Fatalf("balance %d after %d calls, want 10 after 1", balance, applied)
			}
		})
	}
}

// TestConcurrentStress: eight connections process the same 100 events in
// their own shuffled orders at once; each event is applied exactly once.
func TestConcurrentStress(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	const workers, events = 8, 100
	var wg sync.WaitGroup
	appliedBy := make([]int, workers)
	errs := make([]error, workers)
	for w := range workers {
		conn := connect(t, e.dsn)
		order := rand.New(rand.NewPCG(uint64(w), 3)).Perm(events)
		wg.Go(func() {
			for _, i := range order {
				applied, err := e.ib.Process(context.Background(), conn, record(fmt.Sprintf("e-%d", i), int64(i)), deposit(int64(i+1)))
				if err != nil {
					errs[w] = err
					return
				}
				if applied {
					appliedBy[w]++
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range appliedBy {
		total += n
	}
	balance, applied := account(t, connect(t, e.dsn))
	if total != events || applied != events || balance != events*(events+1)/2 {
		t.Fatalf("applied=true %d times (%v), %d handler commits, balance %d; want %d, %d, %d",
			total, appliedBy, applied, balance, events, events, events*(events+1)/2)
	}
}

// TestHandlerErrorRollsBack: a failing handler leaves neither its changes
// nor the inbox row, and the next delivery applies the event. Handle used
// to roll back to a savepoint and leave the caller's transaction usable,
// which invited committing it (and the poll's offsets) past the failed
// record, losing it; now the failure aborts the transaction, so the
// caller's commit commits nothing, its own change included.
func TestHandlerErrorRollsBack(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)
	errBoom := errors.New("boom")
	failing := []struct {
		name string
		fn   inbox.HandlerFunc
		want func(error) bool
	}{
		{"returns an error", func(ctx context.Context, tx pgx.Tx) error {
			if err := deposit(100)(ctx, tx); err != nil {
				return err
			}
			return errBoom
		}, func(err error) bool { return errors.Is(err, errBoom) }},
		{"fails in SQL", func(ctx context.Context, tx pgx.Tx) error {
			if err := deposit(100)(ctx, tx); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `SELECT 1/0`)
			return err
		}, func(err error) bool { return err != nil && strings.Contains(err.Error(), "division by zero") }},
	}
	for _, f := range failing {
		tx, err := conn.Begin(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx(t), `UPDATE account SET balance = balance + 1 WHERE id = 'a'`); err != nil {
			t.Fatal(err)
		}
		applied, err := e.ib.Handle(ctx(t), tx, record("e-1", 0), f.fn)
		if applied || !f.want(err) || !strings.Contains(err.Error(), `event "e-1" (topic=outbox.event.account partition=3 offset=0): handler`) {
			t.Fatalf("%s: Handle = %v, %v; want the handler's error naming the event", f.name, applied, err)
		}
		// The caller cannot commit past the failed record.
		if err := tx.Commit(ctx(t)); !errors.Is(err, pgx.ErrTxCommitRollback) {
			t.Fatalf("%s: commit after a failed Handle: %v, want pgx.ErrTxCommitRollback", f.name, err)
		}
	}
	if balance, applied := account(t, conn); balance != 0 || applied != 0 {
		t.Fatalf("balance %d after %d handler commits; want 0 after 0 (nothing of the failed transactions)", balance, applied)
	}
	if n := inboxRows(t, conn, "walbox_inbox", "billing"); n != 0 {
		t.Fatalf("%d inbox rows after failed handlers, want 0", n)
	}
	applied, err := e.ib.Process(ctx(t), conn, record("e-1", 0), deposit(100))
	if err != nil || !applied {
		t.Fatalf("redelivery: %v, %v; want applied", applied, err)
	}
	if balance, applied := account(t, conn); balance != 100 || applied != 1 {
		t.Fatalf("balance %d after %d calls, want 100 after 1", balance, applied)
	}
}

// TestConsumerDies: a consumer that dies before its transaction commits
// (the connection drops) leaves nothing, so the redelivery applies the
// event; one that dies after the commit but before committing the Kafka
// offset gets the record again, and the inbox skips it.
func TestConsumerDies(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)

	dying, err := pgx.Connect(ctx(t), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := dying.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := e.ib.Handle(ctx(t), tx, record("e-1", 0), deposit(5)); err != nil || !applied {
		t.Fatalf("Handle = %v, %v", applied, err)
	}
	// The process dies here: its connection closes without a commit.
	if err := dying.PgConn().Conn().Close(); err != nil {
		t.Fatal(err)
	}
	applied, err := e.ib.Process(ctx(t), conn, record("e-1", 0), deposit(5))
	if err != nil || !applied {
		t.Fatalf("delivery after a death before commit: %v, %v; want applied", applied, err)
	}
	// Committed, then dies before the offset commit: delivered again.
	applied, err = e.ib.Process(ctx(t), conn, record("e-1", 0), deposit(5))
	if err != nil || applied {
		t.Fatalf("delivery after a death after commit: %v, %v; want not applied", applied, err)
	}
	if balance, applied := account(t, conn); balance != 5 || applied != 1 {
		t.Fatalf("balance %d after %d calls, want 5 after 1", balance, applied)
	}
}

// TestMissingEventIDWritesNothing: a record without the header is refused
// before anything is written, and the handler is not called.
func TestMissingEventIDWritesNothing(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing", Header: "id"})
	conn := connect(t, e.dsn)
	called := false
	_, err := e.ib.Process(ctx(t), conn, record("e-1", 9), func(context.Context, pgx.Tx) error { called = true; return nil })
	if !errors.Is(err, inbox.ErrMissingEventID) || !strings.Contains(err.Error(), "topic=outbox.event.account partition=3 offset=9") {
		t.Fatalf("Process: %v; want ErrMissingEventID naming the record", err)
	}
	if called || inboxRows(t, conn, "walbox_inbox", "billing") != 0 {
		t.Fatalf("handler called %v, or an inbox row written", called)
	}
	rec := &kgo.Record{Topic: "t", Headers: []kgo.RecordHeader{{Key: "id", Value: []byte("6f1c")}}}
	if applied, err := e.ib.Process(ctx(t), conn, rec, deposit(1)); err != nil || !applied {
		t.Fatalf("Process with the id header: %v, %v", applied, err)
	}
}

// waitFor polls cond until it holds, failing the test after 30 seconds.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRepeatableReadConflictIsAnError: under REPEATABLE READ, a transaction
// whose snapshot predates another's commit of the same event gets a
// serialization failure (SQLSTATE 40001) from Handle, as the package
// documentation says, rather than a silent "not applied"; retried in a new
// transaction, the event is found applied.
func TestRepeatableReadConflictIsAnError(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	connA, connB, watch := connect(t, e.dsn), connect(t, e.dsn), connect(t, e.dsn)
	txA, err := connA.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := e.ib.Handle(ctx(t), txA, record("e-1", 0), deposit(10)); err != nil || !applied {
		t.Fatalf("first Handle = %v, %v", applied, err)
	}
	txB, err := connB.BeginTx(ctx(t), pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := txB.Exec(ctx(t), `SELECT 1`); err != nil { // takes B's snapshot
		t.Fatal(err)
	}
	type result struct {
		applied bool
		err     error
	}
	second := make(chan result, 1)
	go func() {
		applied, err := e.ib.Handle(context.Background(), txB, record("e-1", 0), deposit(10))
		second <- result{applied, err}
	}()
	pidB := connB.PgConn().PID()
	waitFor(t, "the second transaction to wait on the first's inbox row", func() bool {
		var waiting bool
		err := watch.QueryRow(ctx(t), `SELECT coalesce(wait_event_type = 'Lock', false) FROM pg_stat_activity WHERE pid = $1`, pidB).Scan(&waiting)
		return err == nil && waiting
	})
	if err := txA.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	r := <-second
	var pgErr *pgconn.PgError
	if r.applied || !errors.As(r.err, &pgErr) || pgErr.Code != "40001" {
		t.Fatalf("second Handle under REPEATABLE READ = %v, %v; want SQLSTATE 40001", r.applied, r.err)
	}
	_ = txB.Rollback(ctx(t))
	if applied, err := e.ib.Process(ctx(t), connB, record("e-1", 0), deposit(10)); err != nil || applied {
		t.Fatalf("retry = %v, %v; want not applied", applied, err)
	}
	if balance, applied := account(t, watch); balance != 10 || applied != 1 {
		t.Fatalf("balance %d after %d calls, want 10 after 1", balance, applied)
	}
}
