package inbox_test

import (
	"context"
	"errors"
	"testing"

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
