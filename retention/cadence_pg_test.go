package retention_test

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/retention"
)

// TestKeeperAdvancesOnPostgres runs the real keeper on a real PostgreSQL
// with --replay-window 24h at its real cadence (one step a minute), on a
// fake clock: the trailing slot does not move during the first window, and
// from the window plus the bound (window/256 + two intervals) on it is
// always between the live slot's position a window ago and its position
// the window plus the bound ago.
//
// Regression (issue #17 item 1): after 26 simulated hours the trailing
// slot had not moved.
func TestKeeperAdvancesOnPostgres(t *testing.T) {
	e := newEnv(t)
	const w = 24 * time.Hour
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var confirmed pglogrepl.LSN
	k := newKeeperOn(t, e, retention.Config{Slot: e.live, ReplaySlot: e.tr, Window: w, Now: func() time.Time { return now }},
		func() pglogrepl.LSN { return confirmed })
	interval := k.Interval()
	bound := w/retention.DefaultBuckets + 2*interval
	conn := keeperConn(t, e)

	var (
		times []time.Time
		lsns  []pglogrepl.LSN
	)
	liveAt := func(at time.Time) pglogrepl.LSN {
		i := sort.Search(len(times), func(i int) bool { return times[i].After(at) })
		if i == 0 {
			return 0
		}
		return lsns[i-1]
	}
	start := time.Time{}
	var created pglogrepl.LSN
	for i := 0; i < int((w+3*bound)/interval); i++ {
		// Heartbeats (every 10 s by default) move the live slot between
		// any two steps, even while the outbox is quiet.
		confirmed = e.write(t)
		e.confirmLive(t, confirmed)
		times, lsns = append(times, now), append(lsns, confirmed)
		if err := k.StepOn(ctxT(t), conn); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		tr := e.confirmed(t, e.tr)
		if i == 0 {
			start, created = now, tr
		}
		switch elapsed := now.Sub(start); {
		case elapsed < w:
			if tr != created {
				t.Fatalf("after %s: trailing slot moved from %s to %s within the window", elapsed, created, tr)
			}
		case elapsed >= w+bound:
			if lo, hi := liveAt(now.Add(-w-bound)), liveAt(now.Add(-w)); tr < lo || tr > hi {
				t.Fatalf("after %s: trailing slot at %s, want between %s (the live slot %s ago) and %s (a window ago)", elapsed, tr, lo, w+bound, hi)
			}
		}
		now = now.Add(interval)
	}
	if tr := e.confirmed(t, e.tr); tr == created {
		t.Fatalf("the trailing slot never moved from %s", created)
	}
}

// TestKeeperRecoversAfterRestartOnPostgres: a keeper that has just started
// (an empty history) advances the trailing slot by the commit times of its
// own stream, outbox rows and heartbeat messages alike: past the
// transactions that committed at least the window ago, and not past the
// others. The clock is fake, set from the commit times the server
// recorded.
func TestKeeperRecoversAfterRestartOnPostgres(t *testing.T) {
	e := newEnv(t)
	e.exec(t, `CREATE PUBLICATION `+e.live+` FOR TABLE w`)
	const w = 7 * 24 * time.Hour
	if _, _, err := retention.EnsureSlot(ctxT(t), e.conn, e.live, e.tr); err != nil {
		t.Fatal(err)
	}
	// Three transactions: an outbox row, a heartbeat (a transactional
	// logical decoding message, which the publication does not list), an
	// outbox row. A transaction on another table is not streamed.
	e.exec(t, `CREATE TABLE other (v int)`)
	var ends []pglogrepl.LSN
	ends = append(ends, e.write(t))
	e.exec(t, `INSERT INTO other VALUES (1)`)
	e.exec(t, `SELECT pg_logical_emit_message(true, 'walbox_heartbeat', '{}')`)
	ends = append(ends, e.current(t))
	ends = append(ends, e.write(t))
	e.confirmLive(t, ends[2])
	commits := e.commitTimes(t)
	if len(commits) != 3 {
		t.Fatalf("the trailing slot's stream has %d transactions, want 3 (two outbox rows and a heartbeat): %v", len(commits), commits)
	}
	confirmed := func() pglogrepl.LSN { return ends[2] }
	for i, c := range commits {
		// A restarted keeper: nothing in its history.
		now := c.Add(w - time.Microsecond)
		k := newKeeperOn(t, e, retention.Config{Slot: e.live, ReplaySlot: e.tr, Window: w, Publication: e.live, Now: func() time.Time { return now }}, confirmed)
		conn := keeperConn(t, e)
		before := e.confirmed(t, e.tr)
		if err := k.StepOn(ctxT(t), conn); err != nil {
			t.Fatal(err)
		}
		if got := e.confirmed(t, e.tr); got != before {
			t.Fatalf("transaction %d committed less than the window ago, yet the trailing slot moved from %s to %s", i, before, got)
		}
		now = c.Add(w)
		if err := k.StepOn(ctxT(t), conn); err != nil {
			t.Fatal(err)
		}
		if got := e.confirmed(t, e.tr); got < ends[i] || (i < 2 && got >= ends[i+1]) {
			t.Fatalf("transaction %d committed a window ago: trailing slot at %s, want past it (%s) and not past the next", i, got, ends[i])
		}
	}
}

func newKeeperOn(t *testing.T, e env, cfg retention.Config, confirmed func() pglogrepl.LSN) *retention.Keeper {
	t.Helper()
	cc, err := pgx.ParseConfig(e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	k, err := retention.New(cfg, cc, confirmed, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func keeperConn(t *testing.T, e env) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (e env) current(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := e.conn.QueryRow(ctxT(t), `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, _ := pglogrepl.ParseLSN(s)
	return lsn
}

// commitTimes returns the commit times of the transactions of the trailing
// slot's stream, from pgoutput's Begin messages (byte 'B' = 66: final LSN,
// then the commit time in microseconds since 2000-01-01).
func (e env) commitTimes(t *testing.T) []time.Time {
	t.Helper()
	rows, err := e.conn.Query(ctxT(t), `SELECT substr(data, 10, 8) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2, 'messages', 'true') WHERE get_byte(data, 0) = 66`, e.tr, e.live)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []time.Time
	epoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for rows.Next() {
		var b []byte
		if err := rows.Scan(&b); err != nil {
			t.Fatal(err)
		}
		var us int64
		for _, c := range b {
			us = us<<8 | int64(c)
		}
		out = append(out, epoch.Add(time.Duration(us)*time.Microsecond))
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}
