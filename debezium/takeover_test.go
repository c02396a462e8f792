package debezium_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
)

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// tx is one committed transaction as the slot decodes it.
type tx struct {
	xid     uint32
	begin   pglogrepl.LSN // the LSN of its Begin
	inserts []pglogrepl.LSN
	end     pglogrepl.LSN
}

// takeoverEnv is a database with the outbox, Debezium's publication and
// pgoutput slot, and two transactions committed after the slot: T1 with
// two events, T2 with three.
type takeoverEnv struct {
	conn *pgx.Conn
	slot string
	txs  []tx
}

func newTakeoverEnv(t *testing.T) *takeoverEnv {
	t.Helper()
	srv := pgtest.Start(t)
	db := pgtest.NewDatabase(t, srv)
	conn, err := pgx.Connect(ctxT(t), srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	sql, err := migrations.FS.ReadFile("001_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	e := &takeoverEnv{conn: conn, slot: db}
	e.exec(t, string(sql))
	e.exec(t, "CREATE PUBLICATION dbz_publication FOR TABLE public.outbox")
	e.exec(t, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", e.slot))
	for i, n := range []int{2, 3} {
		b, err := conn.Begin(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if _, err := b.Exec(ctxT(t), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'Placed', '{}')`,
				fmt.Sprintf("o%d-%d", i, j)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	e.txs = e.decode(t)
	if len(e.txs) != 2 || len(e.txs[0].inserts) != 2 || len(e.txs[1].inserts) != 3 {
		t.Fatalf("decoded %+v", e.txs)
	}
	return e
}

func (e *takeoverEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.conn.Exec(ctxT(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// decode peeks at the slot (as Debezium would receive it) and returns the
// transactions with their insert and commit end positions.
func (e *takeoverEnv) decode(t *testing.T) []tx {
	t.Helper()
	rows, err := e.conn.Query(ctxT(t), `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', 'dbz_publication')`, e.slot)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []tx
	for rows.Next() {
		var (
			l    string
			data []byte
		)
		if err := rows.Scan(&l, &data); err != nil {
			t.Fatal(err)
		}
		lsn, _ := pglogrepl.ParseLSN(l)
		m, err := pglogrepl.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		switch m := m.(type) {
		case *pglogrepl.BeginMessage:
			out = append(out, tx{xid: m.Xid, begin: lsn})
		case *pglogrepl.InsertMessage:
			out[len(out)-1].inserts = append(out[len(out)-1].inserts, lsn)
		case *pglogrepl.CommitMessage:
			out[len(out)-1].end = m.TransactionEndLSN
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (e *takeoverEnv) confirmed(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := e.conn.QueryRow(ctxT(t), "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1", e.slot).Scan(&s); err != nil {
		t.Fatal(err)
	}
	l, _ := pglogrepl.ParseLSN(s)
	return l
}

func (e *takeoverEnv) advance(t *testing.T, to pglogrepl.LSN) {
	t.Helper()
	e.exec(t, fmt.Sprintf("SELECT pg_replication_slot_advance('%s', '%s')", e.slot, to))
}

func (e *takeoverEnv) plan(t *testing.T, off debezium.Offset) (debezium.Plan, error) {
	t.Helper()
	return debezium.PlanTakeover(ctxT(t), e.conn, e.slot, "dbz_publication", []string{"public.outbox"}, off)
}

func TestPlanTakeover(t *testing.T) {
	e := newTakeoverEnv(t)
	t1, t2 := e.txs[0], e.txs[1]
	// Debezium stored an offset while streaming T2 and flushed lsn_commit
	// (the end of T1) to the slot.
	e.advance(t, t1.end)
	before := e.confirmed(t)

	// It had sent T2 whole: walbox starts after T2.
	p, err := e.plan(t, debezium.Offset{LSN: t2.inserts[2], LSNProc: t2.inserts[2], LSNCommit: t1.end, TxID: int64(t2.xid), MessageType: "INSERT"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Start != t2.end || p.Resent != 0 || p.SlotConfirmed != t1.end {
		t.Errorf("whole T2: plan %+v, want start %s", p, t2.end)
	}
	// It had sent 2 of T2's 3 events: walbox streams T2 and skips those 2.
	p, err = e.plan(t, debezium.Offset{LSN: t2.inserts[1], LSNProc: t2.inserts[1], LSNCommit: t1.end, TxID: int64(t2.xid), MessageType: "INSERT"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Start != t1.end || p.Resent != 0 || p.LastTxEnd != t2.end || p.SkipXID != t2.xid || p.SkipUpTo != t2.inserts[1] || p.Skipped != 2 {
		t.Errorf("part of T2: plan %+v, want start %s, skip 2 of xid %d up to %s", p, t1.end, t2.xid, t2.inserts[1])
	}
	// An offset without txId: start at lsn_commit.
	if p, err = e.plan(t, debezium.Offset{LSN: t1.end, LSNCommit: t1.end}); err != nil || p.Start != t1.end {
		t.Errorf("no txId: %+v, %v", p, err)
	}
	// Planning changed nothing.
	if got := e.confirmed(t); got != before {
		t.Errorf("slot moved from %s to %s", before, got)
	}

	// An unfinished snapshot.
	if _, err := e.plan(t, debezium.Offset{LSN: t1.end, Snapshot: true}); !errors.Is(err, debezium.ErrTakeover) || !strings.Contains(err.Error(), "snapshot") {
		t.Errorf("snapshot: %v", err)
	}
	// Debezium 3.x offsets, as stored: mid-snapshot refused, the last
	// snapshot record accepted (walbox took the first over from its lsn
	// and refused the second).
	for _, tt := range []struct {
		value   string
		refused bool
	}{
		{fmt.Sprintf(`{"lsn":%d,"txId":%d,"ts_usec":1,"snapshot":"INITIAL","snapshot_completed":false,"last_snapshot_record":false}`, t1.end, t2.xid), true},
		{fmt.Sprintf(`{"lsn":%d,"ts_usec":1,"snapshot":"INITIAL","snapshot_completed":true,"last_snapshot_record":true}`, t1.end), false},
		{fmt.Sprintf(`{"lsn":%d,"ts_usec":1,"snapshot":true,"last_snapshot_record":true}`, t1.end), false},
	} {
		off, err := debezium.ParseOffset([]byte(tt.value))
		if err != nil {
			t.Fatal(err)
		}
		p, err := e.plan(t, off)
		if tt.refused {
			if !errors.Is(err, debezium.ErrTakeover) || !strings.Contains(err.Error(), `"snapshot": INITIAL`) {
				t.Errorf("%s: %v, want refused", tt.value, err)
			}
			continue
		}
		if err != nil || p.Start != t1.end {
			t.Errorf("%s: plan %+v, %v; want start %s", tt.value, p, err, t1.end)
		}
	}
	// The slot confirmed past the stored offset and its transaction (a
	// killed Debezium confirmed T2 after Kafka acknowledged it; Connect
	// never stored that offset): walbox starts at the slot, saying that
	// duplicates are bounded by the flush interval. It refused before.
	e.advance(t, t2.end)
	p, err = e.plan(t, debezium.Offset{LSN: t2.inserts[1], LSNCommit: t1.end, TxID: int64(t2.xid)})
	if err != nil || p.Start != t2.end || !p.SlotAhead || p.SkipXID != 0 ||
		!strings.Contains(p.Why, "offset.flush.interval.ms") || !strings.Contains(p.Why, t1.end.String()) {
		t.Errorf("slot ahead: plan %+v, %v; want start %s from the slot", p, err, t2.end)
	}
	// A missing slot.
	e.exec(t, fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", e.slot))
	if _, err := e.plan(t, debezium.Offset{LSN: t1.end, LSNCommit: t1.end}); !errors.Is(err, debezium.ErrTakeover) || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing slot: %v", err)
	}
}

// With no stored offset walbox starts at the slot's position, as Debezium
// would.
func TestPlanTakeoverNoOffset(t *testing.T) {
	e := newTakeoverEnv(t)
	e.advance(t, e.txs[0].end)
	p, err := e.plan(t, debezium.Offset{})
	if err != nil || p.Start != e.txs[0].end || !strings.Contains(p.Why, "no stored offset") {
		t.Errorf("plan %+v, %v", p, err)
	}
}

// A Debezium killed inside a transaction: it confirmed on the slot the
// lsn_commit of a record newer than the stored offset, in the same
// transaction T2 (so the slot is past the stored lsn_commit but T2 is
// still pending). Every transaction before the slot's position precedes
// T2, so Debezium had sent it: walbox starts at the slot and still skips
// T2's events the offset says were sent. walbox refused this before.
func TestPlanTakeoverSlotAheadInsideTransaction(t *testing.T) {
	e := newTakeoverEnv(t)
	t1, t2 := e.txs[0], e.txs[1]
	// Confirmed at T1's end, while the stored offset still names T1's
	// start (an older flush of the same stream).
	e.advance(t, t1.end)
	p, err := e.plan(t, debezium.Offset{LSN: t2.inserts[1], LSNCommit: t1.inserts[0], TxID: int64(t2.xid), MessageType: "INSERT"})
	if err != nil {
		t.Fatal(err)
	}
	if p.SlotAhead || p.Start != t1.end || p.SkipXID != t2.xid || p.Skipped != 2 || p.LastTxEnd != t2.end {
		t.Errorf("plan %+v; want start %s, skip 2 of xid %d", p, t1.end, t2.xid)
	}
	// No txId: nothing tells that the stored transaction is pending, so
	// it is the slot-ahead case.
	p, err = e.plan(t, debezium.Offset{LSN: t1.inserts[0], LSNCommit: t1.inserts[0]})
	if err != nil || !p.SlotAhead || p.Start != t1.end {
		t.Errorf("no txId: plan %+v, %v", p, err)
	}
}
