package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestReconnectScheduleIsFastAfterALostSession walks the schedule on a fake
// clock: retries stay at the floor of the backoff for FastRetryWindow
// after a lost session (a promotion takes tens of seconds; the doubling
// backoff reached 16 s within 30 s and resumed up to 15.4 s after the new
// primary accepted writes), and keep it while the servers answer "not a
// writable primary" for up to NotPrimaryRetryWindow; a server that stays
// down past the window gets the doubling backoff up to its cap.
func TestReconnectScheduleIsFastAfterALostSession(t *testing.T) {
	const lo, hi = 500 * time.Millisecond, 30 * time.Second
	refused := errors.New("connect for replication to 127.0.0.1:5432: dial tcp: connection refused")
	readOnly := fmt.Errorf("connect for replication: %w", pgconn.ErrReadOnlyConnection)
	tests := []struct {
		name string
		lost bool  // a session that streamed ended at the start
		err  error // every attempt fails so
		// span is walked in steps of the delays the schedule returns;
		// every delay before fastUntil must be at most lo, and the last
		// one, at the end of span, must be want.
		span, fastUntil time.Duration
		wantLastAbove   time.Duration
	}{
		{name: "refused after a lost session: fast for the window, then doubling", lost: true, err: refused,
			span: FastRetryWindow + 2*time.Minute, fastUntil: FastRetryWindow, wantLastAbove: hi / 2},
		{name: "read-only after a lost session: fast past the window", lost: true, err: readOnly,
			span: NotPrimaryRetryWindow - time.Second, fastUntil: NotPrimaryRetryWindow - time.Second},
		{name: "read-only for good: doubling after its window", lost: true, err: readOnly,
			span: NotPrimaryRetryWindow + 2*time.Minute, fastUntil: NotPrimaryRetryWindow, wantLastAbove: hi / 2},
		{name: "refused at start-up, no session yet: doubling at once", err: refused,
			span: 2 * time.Minute, fastUntil: 0, wantLastAbove: hi / 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
			now := start
			s := reconnectSchedule{lo: lo, hi: hi}
			if tt.lost {
				s.sessionLost(now.Add(-time.Hour), now)
			}
			var last time.Duration
			for now.Sub(start) < tt.span {
				d, fast := s.next(now, tt.err)
				if d <= 0 || d > hi {
					t.Fatalf("at +%s: delay %s outside (0, %s]", now.Sub(start), d, hi)
				}
				if now.Sub(start) < tt.fastUntil && (d > lo || !fast) {
					t.Fatalf("at +%s: delay %s (fast %v), want a fast retry of at most %s", now.Sub(start), d, fast, lo)
				}
				if now.Sub(start) >= tt.fastUntil+time.Minute && fast {
					t.Fatalf("at +%s: still fast retries, a minute past the window %s", now.Sub(start), tt.fastUntil)
				}
				last = d
				now = now.Add(d)
			}
			if last < tt.wantLastAbove {
				t.Fatalf("last delay %s, want above %s (the doubling backoff against a server down for good)", last, tt.wantLastAbove)
			}
		})
	}
}

// TestReconnectScheduleFastAgainAfterEachSession: a session that streamed
// again starts a new fast window, and a success in between resets the
// doubling.
func TestReconnectScheduleFastAgainAfterEachSession(t *testing.T) {
	const lo, hi = 100 * time.Millisecond, 10 * time.Second
	refused := errors.New("connection refused")
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	s := reconnectSchedule{lo: lo, hi: hi}
	s.sessionLost(now.Add(-time.Hour), now)
	now = now.Add(FastRetryWindow + time.Second)
	for i := 0; i < 10; i++ {
		d, _ := s.next(now, refused)
		now = now.Add(d)
	}
	if d, fast := s.next(now, refused); fast || d <= lo {
		t.Fatalf("past the window: delay %s fast %v, want doubling", d, fast)
	}
	s.sessionLost(now.Add(-HealthySession), now)
	if d, fast := s.next(now.Add(time.Second), refused); !fast || d > lo {
		t.Fatalf("after a new lost session: delay %s fast %v, want at most %s", d, fast, lo)
	}
}

func TestNotPrimaryRecognisesServersThatAnswer(t *testing.T) {
	for _, tt := range []struct {
		err  error
		want bool
	}{
		{nil, false},
		{errors.New("dial tcp 127.0.0.1:1: connect: connection refused"), false},
		{fmt.Errorf("connect: %w", pgconn.ErrReadOnlyConnection), true},
		{fmt.Errorf("connect: %w", pgconn.ErrStandbyConnection), true},
		{&pgconn.PgError{Code: "57P03", Message: "the database system is starting up"}, true},
		{&pgconn.PgError{Code: "25006", Message: "cannot execute INSERT in a read-only transaction"}, true},
		{&pgconn.PgError{Code: "42704", Message: "replication slot does not exist"}, false},
		{errors.New("failed to connect to `user=walbox database=app`:\n\t127.0.0.1:5432 (a): dial error: connection refused\n\t127.0.0.1:5433 (b): read only connection"), true},
	} {
		if got := notPrimary(tt.err); got != tt.want {
			t.Errorf("notPrimary(%v) = %v, want %v", tt.err, got, tt.want)
		}
	}
}

func TestExplainSlotWALGone(t *testing.T) {
	gone := &pgconn.PgError{Severity: "ERROR", Code: "58P01", Message: "requested WAL segment 000000010000000000000001 has already been removed"}
	err := explainSlotWALGone(fmt.Errorf("receive: %w", gone), "walbox")
	if !errors.Is(err, gone) {
		t.Fatalf("the server's error is not kept: %v", err)
	}
	for _, want := range []string{`slot "walbox" needs WAL this server no longer has`, "Patroni copies a slot", "slotctl drop --slot walbox", "re-publish"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error lacks %q:\n%v", want, err)
		}
	}
	other := &pgconn.PgError{Code: "42704", Message: `replication slot "walbox" does not exist`}
	if got := explainSlotWALGone(other, "walbox"); got != error(other) {
		t.Errorf("another error was changed: %v", got)
	}
}

// TestReconnectScheduleDoublesForSessionsThatDieAtOnce: a session that
// starts streaming and fails again within a second (a walsender that
// errors on the same WAL record every time, a Kafka error right after the
// start) must not keep the retries at the floor of the backoff for ever:
// only a session that streamed for HealthySession starts a new fast
// window. Before, every such session renewed the window, and walbox
// reconnected, re-decoding from the slot, 2-4 times a second for good.
func TestReconnectScheduleDoublesForSessionsThatDieAtOnce(t *testing.T) {
	const lo, hi = 500 * time.Millisecond, 30 * time.Second
	dead := errors.New("receive: unexpected EOF")
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	now := start
	s := reconnectSchedule{lo: lo, hi: hi}
	var d time.Duration
	var fast bool
	for now.Sub(start) < FastRetryWindow+5*time.Minute {
		began := now
		now = now.Add(time.Second) // streams for a second, then fails
		s.sessionLost(began, now)
		d, fast = s.next(now, dead)
		now = now.Add(d)
	}
	if fast || d < hi/2 {
		t.Fatalf("after %s of sessions that die within a second: delay %s (fast %v), want the doubling backoff near its cap %s", now.Sub(start), d, fast, hi)
	}
	// A session that streamed long enough starts fast again.
	began := now
	now = now.Add(HealthySession)
	s.sessionLost(began, now)
	if d, fast := s.next(now, dead); !fast || d > lo {
		t.Fatalf("after a session of %s: delay %s fast %v, want at most %s", HealthySession, d, fast, lo)
	}
}
