package heartbeat

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
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

// sigRow scans the signature of pg_logical_emit_message, unless ctx was
// done when the query was sent: pgx then closes the connection and fails.
type sigRow struct{ ctx context.Context }

func (r sigRow) Scan(dest ...any) error {
	if err := r.ctx.Err(); err != nil {
		return err
	}
	*dest[0].(*string) = "pg_logical_emit_message(boolean,text,text)"
	return nil
}

// slowDenied answers every Exec with "permission denied" once ctx is done,
// as a loaded server does that answers at the tick's deadline.
type slowDenied struct{}

func (slowDenied) Exec(ctx context.Context, _ string, _ ...any) (pgconn.CommandTag, error) {
	<-ctx.Done()
	return pgconn.CommandTag{}, &pgconn.PgError{Code: "42501", Message: "permission denied for function pg_logical_emit_message"}
}
func (slowDenied) QueryRow(ctx context.Context, _ string, _ ...any) pgx.Row { return sigRow{ctx} }
func (slowDenied) IsClosed() bool                                           { return false }

// TestDeniedAdviceOutlivesTheTick: the advice's lookup of the signature used
// to run on the tick's context (one --heartbeat-interval for every query of
// the tick), so on a loaded server that answered the emit late the lookup
// found the deadline passed, pgx closed the connection, and the advice said
// "pg_logical_emit_message(...)" instead of the statement to run (seen in
// TestHeartbeatWithoutPrivilege under load).
func TestDeniedAdviceOutlivesTheTick(t *testing.T) {
	var logs logRecorder
	m, err := New(time.Second, "walbox", &pgx.ConnConfig{Config: pgconn.Config{User: "walbox"}}, nil, prometheus.NewRegistry(), slog.New(&logs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	m.emit(ctx, slowDenied{}, false)
	want := `GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(boolean,text,text) TO "walbox"`
	if got := logs.messages(); len(got) != 1 || !strings.Contains(got[0], want) {
		t.Fatalf("logged %q, want one error containing %q", got, want)
	}
}

// logRecorder keeps the messages of the records it handles.
type logRecorder struct {
	mu   sync.Mutex
	msgs []string
}

func (r *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs = append(r.msgs, rec.Message)
	return nil
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }
func (r *logRecorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.msgs...)
}
