package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// fakeConn runs exec for every Exec.
type fakeConn struct {
	exec func(sql string, args []any) error
}

func (f fakeConn) Exec(_ context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return pgconn.CommandTag{}, f.exec(sql, args)
}
func (fakeConn) QueryRow(context.Context, string, ...any) pgx.Row { return errRow{} }
func (fakeConn) IsClosed() bool                                   { return false }

type errRow struct{}

func (errRow) Scan(...any) error { return errors.New("no rows in a fake") }

// TestEmitRegistersBeforeExec: the relay can receive a heartbeat through the
// slot before the emitting Exec returns (the commit is decoded as soon as it
// is flushed). The heartbeat used to be registered as outstanding only after
// Exec returned, so Seen found nothing, the heartbeat stayed outstanding for
// good and walbox_heartbeat_lag_seconds grew without end. A failed emit
// takes its heartbeat back.
func TestEmitRegistersBeforeExec(t *testing.T) {
	m, err := New(time.Second, "walbox", &pgx.ConnConfig{}, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	// The relay sees the heartbeat while Exec is still running.
	seenFirst := fakeConn{exec: func(_ string, args []any) error {
		m.Seen([]byte(args[1].(string)))
		return nil
	}}
	if !m.emit(context.Background(), seenFirst, false) {
		t.Fatal("emit: connection unusable")
	}
	if m.Received() != 1 || len(m.outstanding) != 0 {
		t.Fatalf("heartbeat seen before Exec returned: received %d, outstanding %d; want 1 and 0", m.Received(), len(m.outstanding))
	}
	failing := fakeConn{exec: func(string, []any) error { return &pgconn.PgError{Code: "25006", Message: "read-only"} }}
	if !m.emit(context.Background(), failing, false) {
		t.Fatal("emit after an SQL error: connection unusable")
	}
	if len(m.outstanding) != 0 {
		t.Fatalf("a failed emit left %d heartbeats outstanding", len(m.outstanding))
	}
	if lag := m.Lag(); lag > time.Second {
		t.Errorf("lag after a failed emit = %s, want the last round trip", lag)
	}
}

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }
