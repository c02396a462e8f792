package inbox_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
)

// TestProcessBatchPanicRollsBack: a handler that panics inside
// ProcessBatch (or Process) must not leave ProcessBatch's transaction open.
// A consumer loop that recovers the panic (a worker supervisor, an HTTP
// handler) then carries on with the same connection or pool: an open,
// aborted transaction made every later batch on that connection fail
// ("current transaction is aborted"), and on a pool it would keep the
// connection acquired for good.
func TestProcessBatchPanicRollsBack(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	errBoom := errors.New("boom")
	panicky := func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
		if err := depositEach(ctx, tx, rec); err != nil {
			return err
		}
		if rec.Offset == 1 {
			panic(errBoom)
		}
		return nil
	}
	// recovered runs f and returns what it panicked with.
	recovered := func(f func()) (p any) {
		defer func() { p = recover() }()
		f()
		return nil
	}

	t.Run("conn", func(t *testing.T) {
		conn := connect(t, e.dsn)
		for _, process := range []func(){
			func() { _, _ = e.ib.ProcessBatch(ctx(t), conn, records(0, 3), panicky) },
			func() {
				_, _ = e.ib.Process(ctx(t), conn, record("e-1", 1), func(ctx context.Context, tx pgx.Tx) error { return panicky(ctx, tx, record("e-1", 1)) })
			},
		} {
			if p := recovered(process); p != errBoom {
				t.Fatalf("recovered %v, want the handler's panic", p)
			}
			if st := conn.PgConn().TxStatus(); st != 'I' {
				t.Fatalf("after the handler's panic the connection's transaction status is %q, want 'I' (idle, rolled back)", st)
			}
		}
		applied, err := e.ib.ProcessBatch(ctx(t), conn, records(0, 3), depositEach)
		if err != nil || !allTrue(applied) {
			t.Fatalf("the next batch on the same connection: %v, %v; want all applied", applied, err)
		}
	})

	if balance, calls := account(t, connect(t, e.dsn)); balance != 3 || calls != 3 {
		t.Fatalf("balance %d after %d calls, want 3 after 3 (the panicking batches left nothing)", balance, calls)
	}
}

// TestUnstorableEventID: an event id PostgreSQL's text cannot hold (a NUL
// byte; bytes that are not UTF-8, such as a UUID sent as its 16 raw bytes)
// is refused like a missing one, with ErrMissingEventID naming the record,
// before anything is written: it used to fail the batch's INSERT with an
// encoding error that named no record and aborted the caller's
// transaction.
func TestUnstorableEventID(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)
	for _, id := range []string{"a\x00b", "\x9f\x01\xc3\x28"} {
		tx, err := conn.Begin(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		recs := []*kgo.Record{record("e-0", 0), record(id, 1)}
		_, err = e.ib.HandleBatch(ctx(t), tx, recs, depositEach)
		if !errors.Is(err, inbox.ErrMissingEventID) || !strings.Contains(err.Error(), "offset=1") {
			t.Fatalf("id %q: %v; want ErrMissingEventID naming offset 1", id, err)
		}
		if _, err := tx.Exec(ctx(t), `SELECT 1`); err != nil {
			t.Fatalf("id %q: the transaction is no longer usable after the refusal: %v", id, err)
		}
		if err := tx.Rollback(ctx(t)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnstorableSource: a Config.Source that returns a name PostgreSQL's
// text cannot hold refuses the batch naming the record, before anything is
// written, like a Source's error (it failed the INSERT naming no record).
func TestUnstorableSource(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	ib, err := inbox.New(inbox.Config{Consumer: "billing", Source: func(rec *kgo.Record) (string, error) {
		if rec.Offset == 1 {
			return "t\x00", nil
		}
		return rec.Topic, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, e.dsn)
	tx, err := conn.Begin(ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = ib.HandleBatch(ctx(t), tx, records(0, 2), depositEach)
	if err == nil || !strings.Contains(err.Error(), "offset=1") || !strings.Contains(err.Error(), "Config.Source") {
		t.Fatalf("HandleBatch = %v; want an error naming offset 1 and Config.Source", err)
	}
	if _, err := tx.Exec(ctx(t), `SELECT 1`); err != nil {
		t.Fatalf("the transaction is no longer usable after the refusal: %v", err)
	}
}

// TestSimpleProtocol: behind pgbouncer in transaction mode a consumer runs
// pgx with QueryExecModeSimpleProtocol (or Exec), so the arrays of the
// batch's INSERT and Cleanup's arguments go as literals. Ids that need
// quoting inside an array literal (quotes, backslashes, commas, braces,
// spaces, the word NULL, an empty source) are recorded as themselves.
func TestSimpleProtocol(t *testing.T) {
	odd := []string{`NULL`, `null`, `a"b`, `a\b`, `a,b`, `{x}`, ` sp `, `it's`, `$1`, `é`}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec, pgx.QueryExecModeDescribeExec} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, inbox.Config{Consumer: "billing", Source: inbox.SourceTopic})
			cfg, err := pgx.ParseConfig(e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			cfg.DefaultQueryExecMode = mode
			conn, err := pgx.ConnectConfig(ctx(t), cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			var recs []*kgo.Record
			for i, id := range odd {
				recs = append(recs, record(id, int64(i)))
			}
			for round, want := range []bool{true, false} {
				applied, err := e.ib.ProcessBatch(ctx(t), conn, recs, depositEach)
				if err != nil || len(applied) != len(odd) {
					t.Fatalf("round %d: %v, %v", round, applied, err)
				}
				for i, a := range applied {
					if a != want {
						t.Fatalf("round %d: id %q applied=%v, want %v", round, odd[i], a, want)
					}
				}
			}
			rows, err := conn.Query(ctx(t), `SELECT event_id FROM walbox_inbox ORDER BY kafka_offset`)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil || fmt.Sprint(got) != fmt.Sprint(odd) {
				t.Fatalf("stored ids %q, %v; want %q", got, err, odd)
			}
			if _, err := conn.Exec(ctx(t), `UPDATE walbox_inbox SET received_at = now() - interval '2 hours'`); err != nil {
				t.Fatal(err)
			}
			if n, err := e.ib.Cleanup(ctx(t), conn, time.Hour, 3); err != nil || n != int64(len(odd)) {
				t.Fatalf("Cleanup = %d, %v; want %d", n, err, len(odd))
			}
		})
	}
}

// TestFrozenHolderEndedByIdleTimeout: what the package documentation
// advises for a former owner frozen mid-batch: with
// idle_in_transaction_session_timeout on its session, the server ends the
// frozen transaction, the new owner's waiting batch applies the event, and
// the former owner's late commit fails, so the event is applied once.
func TestFrozenHolderEndedByIdleTimeout(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	cfg, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["idle_in_transaction_session_timeout"] = "1s"
	frozen, err := pgx.ConnectConfig(ctx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Close(context.Background())
	owner, watch := connect(t, e.dsn), connect(t, e.dsn)

	inside, thaw := make(chan struct{}), make(chan struct{})
	late := make(chan error, 1)
	go func() {
		_, err := e.ib.ProcessBatch(context.Background(), frozen, records(0, 1), func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
			if err := depositEach(ctx, tx, rec); err != nil {
				return err
			}
			close(inside)
			<-thaw // frozen, idle in transaction
			return nil
		})
		late <- err
	}()
	<-inside
	pid := frozen.PgConn().PID()
	applied, err := e.ib.ProcessBatch(ctx(t), owner, records(0, 1), depositEach)
	if err != nil || len(applied) != 1 || !applied[0] {
		t.Fatalf("the new owner's batch: %v, %v; want applied once the frozen transaction was ended", applied, err)
	}
	waitFor(t, "the frozen session to be gone", func() bool {
		var n int
		return watch.QueryRow(ctx(t), `SELECT count(*) FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&n) == nil && n == 0
	})
	close(thaw)
	if err := <-late; err == nil {
		t.Fatal("the frozen owner's late commit succeeded; the server should have ended its transaction")
	}
	if balance, calls := account(t, watch); balance != 1 || calls != 1 {
		t.Fatalf("balance %d after %d calls, want 1 after 1", balance, calls)
	}
}
