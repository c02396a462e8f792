package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
	"github.com/walbox/walbox/internal/pgtest"
)

// records returns n records with event ids e-<from> … e-<from+n-1>.
func records(from, n int) []*kgo.Record {
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = record(fmt.Sprintf("e-%d", from+i), int64(from+i))
	}
	return recs
}

// depositEach is a RecordFunc adding 1 to account a per record.
func depositEach(ctx context.Context, tx pgx.Tx, _ *kgo.Record) error { return deposit(1)(ctx, tx) }

// TestWholePollTakesNoSubtransactions: applying a poll of 100 records in
// one transaction, as the README recommends, used to take a savepoint per
// record inside Handle: 100 subtransactions with an XID each, past the 64
// the backend's subxid cache holds, so every other backend's snapshot had
// to look them up in pg_subtrans. Now neither Handle per record nor
// HandleBatch assigns any XID but the transaction's own.
//
// Two measures, each of which fails on the old Handle: the XIDs the
// transaction assigned, read from the server's XID counter before and after
// it (the test's server has no other client, and a subtransaction that
// writes assigns an XID of its own), and, on PostgreSQL 16 and later, the
// backend's own counters from pg_stat_get_backend_subxact (subxact_count 0,
// not overflowed; the old code reached 64, overflowed).
func TestWholePollTakesNoSubtransactions(t *testing.T) {
	parallel(t)
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
		for _, mode := range []string{"Handle per record", "HandleBatch"} {
			t.Run(mode, func(t *testing.T) {
				e := newEnvOn(t, srv, inbox.Config{Consumer: "billing"})
				conn := connect(t, e.dsn)
				// pg_current_xact_id assigns one XID (its statement's) and
				// returns it: the next one assigned is before+1.
				var before uint64
				if err := conn.QueryRow(ctx(t), `SELECT pg_current_xact_id()::text::bigint`).Scan(&before); err != nil {
					t.Fatal(err)
				}
				tx, err := conn.Begin(ctx(t))
				if err != nil {
					t.Fatal(err)
				}
				defer func() { _ = tx.Rollback(context.Background()) }()
				recs := records(0, 100)
				if mode == "HandleBatch" {
					applied, err := e.ib.HandleBatch(ctx(t), tx, recs, depositEach)
					if err != nil || len(applied) != 100 || !applied[0] || !applied[99] {
						t.Fatalf("HandleBatch = %v, %v", applied, err)
					}
				} else {
					for _, rec := range recs {
						if applied, err := e.ib.Handle(ctx(t), tx, rec, deposit(1)); err != nil || !applied {
							t.Fatalf("Handle = %v, %v", applied, err)
						}
					}
				}
				var after uint64
				if err := tx.QueryRow(ctx(t), `SELECT pg_current_xact_id()::text::bigint`).Scan(&after); err != nil {
					t.Fatal(err)
				}
				if srv.MajorVersion() >= 16 {
					if _, err := tx.Exec(ctx(t), `SELECT pg_stat_clear_snapshot()`); err != nil {
						t.Fatal(err)
					}
					var count int
					var overflowed bool
					if err := tx.QueryRow(ctx(t), `SELECT s.subxact_count, s.subxact_overflowed
						FROM pg_stat_get_backend_idset() b, pg_stat_get_backend_subxact(b) s
						WHERE pg_stat_get_backend_pid(b) = pg_backend_pid()`).Scan(&count, &overflowed); err != nil {
						t.Fatal(err)
					}
					if count != 0 || overflowed {
						t.Errorf("pg_stat_get_backend_subxact: subxact_count %d, overflowed %v; want 0, false", count, overflowed)
					}
				}
				if err := tx.Commit(ctx(t)); err != nil {
					t.Fatal(err)
				}
				var next uint64
				if err := conn.QueryRow(ctx(t), `SELECT pg_current_xact_id()::text::bigint`).Scan(&next); err != nil {
					t.Fatal(err)
				}
				// The transaction's own XID is before+1; its subtransactions'
				// come after it, so the next free one is before+2 without any.
				if subxids := next - before - 2; next < before+2 || subxids != 0 {
					t.Errorf("100 records in one transaction assigned XIDs %d to %d (the transaction's: %d): %d subtransactions, want 0",
						before+1, next-1, after, int64(next)-int64(before)-2)
				}
				if balance, applied := account(t, conn); balance != 100 || applied != 100 {
					t.Fatalf("balance %d after %d calls, want 100 after 100", balance, applied)
				}
			})
		}
	})
}

// TestBatchHandlerErrorAbortsTransaction: when the handler fails for one
// record of a batch, the ids of that record and of the ones after it are
// already in the transaction, and the handler may have done part of its
// work. HandleBatch therefore aborts the transaction: it cannot be
// committed past the failure, so nothing of the batch is recorded, and the
// redelivery applies every record once.
func TestBatchHandlerErrorAbortsTransaction(t *testing.T) {
	errBoom := errors.New("boom")
	failing := []struct {
		name string
		fail func(ctx context.Context, tx pgx.Tx) error
		want func(error) bool
	}{
		{"returns an error", func(context.Context, pgx.Tx) error { return errBoom },
			func(err error) bool { return errors.Is(err, errBoom) }},
		{"fails in SQL", func(ctx context.Context, tx pgx.Tx) error { _, err := tx.Exec(ctx, `SELECT 1/0`); return err },
			func(err error) bool { return err != nil && strings.Contains(err.Error(), "division by zero") }},
		{"panics", func(context.Context, pgx.Tx) error { panic(errBoom) },
			func(err error) bool { return err == nil }},
	}
	for _, f := range failing {
		t.Run(f.name, func(t *testing.T) {
			e := newEnv(t, inbox.Config{Consumer: "billing"})
			conn := connect(t, e.dsn)
			recs := records(0, 10)
			tx, err := conn.Begin(ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			var applied []bool
			func() {
				defer func() {
					if p := recover(); p != nil && f.name != "panics" {
						t.Fatalf("panic: %v", p)
					}
				}()
				applied, err = e.ib.HandleBatch(ctx(t), tx, recs, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
					if err := deposit(100)(ctx, tx); err != nil {
						return err
					}
					if rec.Offset == 5 {
						return f.fail(ctx, tx)
					}
					return nil
				})
			}()
			if f.name != "panics" {
				var herr *inbox.HandlerError
				if applied != nil || !f.want(err) || !errors.As(err, &herr) || herr.Index != 5 || herr.Record != recs[5] ||
					!strings.Contains(err.Error(), `event "e-5" (topic=outbox.event.account partition=3 offset=5): handler`) {
					t.Fatalf("HandleBatch = %v, %v; want a *HandlerError for record 5 wrapping the handler's error", applied, err)
				}
			}
			// The caller carries on regardless: the transaction refuses.
			if _, err := tx.Exec(ctx(t), `UPDATE account SET balance = balance + 1 WHERE id = 'a'`); err == nil {
				t.Fatal("a statement after the handler's failure succeeded; the transaction should be aborted")
			}
			if err := tx.Commit(ctx(t)); !errors.Is(err, pgx.ErrTxCommitRollback) {
				t.Fatalf("commit after the handler's failure: %v, want pgx.ErrTxCommitRollback", err)
			}
			if balance, calls := account(t, conn); balance != 0 || calls != 0 {
				t.Fatalf("balance %d after %d calls after the failed batch, want 0 after 0", balance, calls)
			}
			if n := inboxRows(t, conn, "walbox_inbox", "billing"); n != 0 {
				t.Fatalf("%d inbox rows after the failed batch, want 0", n)
			}
			applied, err = e.ib.ProcessBatch(ctx(t), conn, recs, depositEach)
			if err != nil || len(applied) != 10 || !allTrue(applied) {
				t.Fatalf("redelivery: %v, %v; want all 10 applied", applied, err)
			}
			if balance, calls := account(t, conn); balance != 10 || calls != 10 {
				t.Fatalf("balance %d after %d calls, want 10 after 10", balance, calls)
			}
		})
	}
}

func allTrue(bs []bool) bool {
	for _, b := range bs {
		if !b {
			return false
		}
	}
	return true
}

// TestBatchDuplicates: a batch holding an event twice, and events applied
// by an earlier batch, apply each event once; applied is true exactly for
// each event's first copy that was new.
func TestBatchDuplicates(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)
	if _, err := e.ib.ProcessBatch(ctx(t), conn, records(0, 3), depositEach); err != nil {
		t.Fatal(err)
	}
	batch := []*kgo.Record{record("e-4", 10), record("e-1", 11), record("e-4", 12), record("e-3", 13), record("e-1", 14), record("e-2", 15)}
	var order []int64
	applied, err := e.ib.ProcessBatch(ctx(t), conn, batch, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
		order = append(order, rec.Offset)
		return depositEach(ctx, tx, rec)
	})
	want := []bool{true, false, false, true, false, false}
	if err != nil || fmt.Sprint(applied) != fmt.Sprint(want) {
		t.Fatalf("ProcessBatch = %v, %v; want %v", applied, err, want)
	}
	if fmt.Sprint(order) != "[10 13]" {
		t.Fatalf("handler called for offsets %v, want [10 13] (in the batch's order)", order)
	}
	if balance, calls := account(t, conn); balance != 5 || calls != 5 {
		t.Fatalf("balance %d after %d calls, want 5 after 5", balance, calls)
	}
	if applied, err := e.ib.ProcessBatch(ctx(t), conn, nil, depositEach); applied != nil || err != nil {
		t.Fatalf("empty batch: %v, %v", applied, err)
	}
}

// TestConcurrentBatches: eight connections apply the same 100 events in
// their own shuffled orders, in batches of 10, at once: each event is
// applied exactly once, and no batch fails. Batches that share events lock
// the shared rows in the same (sorted) order, so they wait for each other
// instead of deadlocking.
func TestConcurrentBatches(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	const workers, events, size = 8, 100, 10
	var wg sync.WaitGroup
	appliedBy := make([]int, workers)
	errs := make([]error, workers)
	for w := range workers {
		conn := connect(t, e.dsn)
		order := rand.New(rand.NewPCG(uint64(w), 5)).Perm(events)
		wg.Go(func() {
			for start := 0; start < events; start += size {
				var batch []*kgo.Record
				for _, i := range order[start : start+size] {
					batch = append(batch, record(fmt.Sprintf("e-%d", i), int64(i)))
				}
				applied, err := e.ib.ProcessBatch(context.Background(), conn, batch, depositEach)
				if err != nil {
					errs[w] = err
					return
				}
				for _, a := range applied {
					if a {
						appliedBy[w]++
					}
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
	balance, calls := account(t, connect(t, e.dsn))
	if total != events || calls != events || balance != events {
		t.Fatalf("applied=true %d times (%v), %d handler commits, balance %d; want %d each", total, appliedBy, calls, balance, events)
	}
}

// TestProcessInsideTransaction: Process on a pgx.Tx commits only a
// savepoint; when the outer transaction rolls back, the inbox row goes
// with it and the next delivery applies the event (which is why the
// offset waits for the outer COMMIT).
func TestProcessInsideTransaction(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)
	outer, err := conn.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if applied, err := e.ib.Process(ctx(t), outer, record("e-1", 0), deposit(5)); err != nil || !applied {
		t.Fatalf("Process in a transaction = %v, %v", applied, err)
	}
	if err := outer.Rollback(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if applied, err := e.ib.Process(ctx(t), conn, record("e-1", 0), deposit(5)); err != nil || !applied {
		t.Fatalf("delivery after the outer rollback = %v, %v; want applied", applied, err)
	}
	if balance, calls := account(t, conn); balance != 5 || calls != 1 {
		t.Fatalf("balance %d after %d calls, want 5 after 1", balance, calls)
	}
}

// TestMissingEventIDRefusesBatch: one record without a usable id refuses
// the whole batch, naming it, before anything is written or any handler
// runs; the transaction stays usable.
func TestMissingEventIDRefusesBatch(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)
	bad := &kgo.Record{Topic: "outbox.event.account", Partition: 1, Offset: 77}
	batch := []*kgo.Record{record("e-1", 0), bad, record("e-2", 2)}
	tx, err := conn.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	called := 0
	_, err = e.ib.HandleBatch(ctx(t), tx, batch, func(context.Context, pgx.Tx, *kgo.Record) error { called++; return nil })
	if !errors.Is(err, inbox.ErrMissingEventID) || !containsAll(err.Error(), "record 2 of 3", "topic=outbox.event.account partition=1 offset=77") {
		t.Fatalf("HandleBatch: %v; want ErrMissingEventID naming record 2", err)
	}
	if _, err := tx.Exec(ctx(t), `SELECT 1`); err != nil {
		t.Fatalf("the transaction after a refused batch: %v", err)
	}
	if err := tx.Commit(ctx(t)); err != nil {
		t.Fatal(err)
	}
	if called != 0 || inboxRows(t, conn, "walbox_inbox", "billing") != 0 {
		t.Fatalf("handler called %d times, or inbox rows written", called)
	}
}

// TestConsumerDiesMidBatch: a consumer whose connection drops after
// HandleBatch applied a batch but before the commit leaves nothing: the
// redelivery applies every record; one that committed gets each skipped.
func TestConsumerDiesMidBatch(t *testing.T) {
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
	recs := records(0, 20)
	if applied, err := e.ib.HandleBatch(ctx(t), tx, recs, depositEach); err != nil || !allTrue(applied) {
		t.Fatalf("HandleBatch = %v, %v", applied, err)
	}
	// The process dies here: its connection closes without a commit.
	if err := dying.PgConn().Conn().Close(); err != nil {
		t.Fatal(err)
	}
	if applied, err := e.ib.ProcessBatch(ctx(t), conn, recs, depositEach); err != nil || !allTrue(applied) {
		t.Fatalf("redelivery after a death before the commit: %v, %v; want all applied", applied, err)
	}
	if applied, err := e.ib.ProcessBatch(ctx(t), conn, recs, depositEach); err != nil || fmt.Sprint(applied) != fmt.Sprint(make([]bool, 20)) {
		t.Fatalf("redelivery after the commit: %v, %v; want none applied", applied, err)
	}
	if balance, calls := account(t, conn); balance != 20 || calls != 20 {
		t.Fatalf("balance %d after %d calls, want 20 after 20", balance, calls)
	}
}
