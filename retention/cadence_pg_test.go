package retention_test

import (
	"context"
	"encoding/binary"
	"io"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/slotctl"
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
		confirmed = e.writeRows(t, 1)
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
// recorded. (PostgreSQL 14 also streams an empty transaction for the
// write to a table outside the publication; it counts like the others.)
func TestKeeperRecoversAfterRestartOnPostgres(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		testKeeperRecoversAfterRestart(t, newEnvOn(t, sharedFor(t, v)))
	})
}

func testKeeperRecoversAfterRestart(t *testing.T, e env) {
	e.exec(t, `CREATE PUBLICATION `+e.live+` FOR TABLE w`)
	const w = 7 * 24 * time.Hour
	if _, _, err := retention.EnsureSlot(ctxT(t), e.conn, e.live, e.tr); err != nil {
		t.Fatal(err)
	}
	// An outbox row, a write to another table (not streamed from
	// PostgreSQL 15 on), a heartbeat (a transactional logical decoding
	// message, which the publication does not list), an outbox row.
	e.exec(t, `CREATE TABLE other (v int)`)
	e.write(t)
	e.exec(t, `INSERT INTO other VALUES (1)`)
	e.exec(t, `SELECT pg_logical_emit_message(true, 'walbox_heartbeat', '{}')`)
	last := e.write(t)
	e.confirmLive(t, last)
	commits := e.commits(t)
	if len(commits) < 3 {
		t.Fatalf("the trailing slot's stream has %d transactions, want at least 3 (two outbox rows and a heartbeat): %v", len(commits), commits)
	}
	confirmed := func() pglogrepl.LSN { return last }
	for i, c := range commits {
		// A restarted keeper: nothing in its history.
		now := c.at.Add(w - time.Microsecond)
		k := newKeeperOn(t, e, retention.Config{Slot: e.live, ReplaySlot: e.tr, Window: w, Publication: e.live, Now: func() time.Time { return now }}, confirmed)
		conn := keeperConn(t, e)
		if err := k.StepOn(ctxT(t), conn); err != nil {
			t.Fatal(err)
		}
		if got := e.confirmed(t, e.tr); got >= c.end {
			t.Fatalf("transaction %d (ending at %s) committed less than the window ago, yet the trailing slot is at %s", i, c.end, got)
		}
		now = c.at.Add(w)
		if err := k.StepOn(ctxT(t), conn); err != nil {
			t.Fatal(err)
		}
		got := e.confirmed(t, e.tr)
		if got < c.end || (i+1 < len(commits) && commits[i+1].at.After(c.at) && got >= commits[i+1].end) {
			t.Fatalf("transaction %d committed a window ago: trailing slot at %s, want past it (%s) and not past the next", i, got, c.end)
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

type commit struct {
	at  time.Time
	end pglogrepl.LSN
}

// commits returns the transactions of the trailing slot's stream, from
// pgoutput's Commit messages (byte 'C' = 67: flags, commit LSN, end LSN,
// commit time in microseconds since 2000-01-01). It reads a temporary copy,
// as walbox does: a slot decoded directly is no longer taken for walbox's.
func (e env) commits(t *testing.T) []commit {
	t.Helper()
	copyName, drop, err := slotctl.TemporaryCopy(ctxT(t), e.conn, e.tr, "walbox_test_peek")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := drop(); err != nil {
			t.Error(err)
		}
	}()
	rows, err := e.conn.Query(ctxT(t), `SELECT substr(data, 11, 8), substr(data, 19, 8) FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', $2, 'messages', 'true') WHERE get_byte(data, 0) = 67`, copyName, e.live)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []commit
	epoch := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for rows.Next() {
		var end, at []byte
		if err := rows.Scan(&end, &at); err != nil {
			t.Fatal(err)
		}
		out = append(out, commit{end: pglogrepl.LSN(binary.BigEndian.Uint64(end)),
			at: epoch.Add(time.Duration(int64(binary.BigEndian.Uint64(at))) * time.Microsecond)})
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestRecoveryScanLeavesTheSlotWalboxs: the recovery scan after a restart
// reads the trailing slot's stream, yet the next start must still take the
// slot for walbox's own. walbox recognises its trailing slot by its never
// having been decoded to a client (pg_stat_replication_slots), so the scan
// must decode a temporary copy, never the slot itself.
//
// Regression: the scan peeked the trailing slot directly; the slot's
// statistics then counted decoded transactions, and the next start refused
// it as another consumer's slot.
func TestRecoveryScanLeavesTheSlotWalboxs(t *testing.T) {
	e := newEnv(t)
	if e.serverMajor(t) < 15 {
		t.Skip("pg_stat_force_next_flush needs PostgreSQL 15")
	}
	e.exec(t, `CREATE PUBLICATION `+e.live+` FOR TABLE w`)
	if _, _, err := retention.EnsureSlot(ctxT(t), e.conn, e.live, e.tr); err != nil {
		t.Fatal(err)
	}
	e.write(t)
	last := e.write(t)
	e.confirmLive(t, last)
	const w = time.Hour
	now := time.Now().Add(2 * w) // everything committed more than a window ago
	k := newKeeperOn(t, e, retention.Config{Slot: e.live, ReplaySlot: e.tr, Window: w, Publication: e.live, Now: func() time.Time { return now }},
		func() pglogrepl.LSN { return last })
	conn := keeperConn(t, e)
	if err := k.StepOn(ctxT(t), conn); err != nil {
		t.Fatal(err)
	}
	if got := e.confirmed(t, e.tr); got < last {
		t.Fatalf("the recovery scan left the trailing slot at %s, want it past the last transaction (%s): the test did not exercise the scan", got, last)
	}
	// Make the keeper session's decoding statistics visible now rather
	// than within a second.
	for _, q := range []string{`SELECT pg_stat_force_next_flush()`, `SELECT 1`} {
		if _, err := conn.Exec(ctxT(t), q); err != nil {
			t.Fatal(err)
		}
	}
	var decoded int64
	if err := e.conn.QueryRow(ctxT(t), `SELECT COALESCE((SELECT total_txns FROM pg_stat_replication_slots WHERE slot_name = $1), 0)`, e.tr).Scan(&decoded); err != nil {
		t.Fatal(err)
	}
	if decoded != 0 {
		t.Errorf("pg_stat_replication_slots counts %d decoded transactions for the trailing slot after the scan, want 0", decoded)
	}
	if _, _, err := retention.EnsureSlot(ctxT(t), e.conn, e.live, e.tr); err != nil {
		t.Errorf("the next start refuses the trailing slot the scan read: %v", err)
	}
}

func (e env) serverMajor(t *testing.T) int {
	t.Helper()
	var n int
	if err := e.conn.QueryRow(ctxT(t), `SELECT current_setting('server_version_num')::int / 10000`).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
