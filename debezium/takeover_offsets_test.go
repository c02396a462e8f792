package debezium_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/debezium"
)

// copyEnv adds to a takeoverEnv (T1 with 2 events, T2 with 3) a
// transaction loaded with COPY (pgx CopyFrom): one heap_multi_insert
// record, so logical decoding gives its 50 rows one LSN; then a
// transaction with one insert, one with three, and one (mixed) with one
// insert followed by a COPY of 5 rows. The slot is confirmed at T1's end.
type copyEnv struct {
	*takeoverEnv
	t1, t2, cp, one, three, mixed tx
}

const copyRows = 50

func newCopyEnv(t *testing.T) *copyEnv {
	t.Helper()
	e := newTakeoverEnv(t)
	ctx := ctxT(t)
	rows := make([][]any, copyRows)
	for i := range rows {
		// The id is given: a volatile default (gen_random_uuid()) makes
		// COPY insert row by row.
		rows[i] = []any{fmt.Sprintf("00000000-0000-4000-8000-%012d", i), "order", fmt.Sprintf("c-%d", i), "Placed", "{}"}
	}
	b, err := e.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.CopyFrom(ctx, pgx.Identifier{"public", "outbox"}, []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload"}, pgx.CopyFromRows(rows)); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{1, 3} {
		b, err := e.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for j := range n {
			if _, err := b.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'Placed', '{}')`, fmt.Sprintf("n%d-%d", n, j)); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.Commit(ctx); err != nil {
			t.Fatal(err)
		}
	}
	mixedRows := make([][]any, 5)
	for i := range mixedRows {
		mixedRows[i] = []any{fmt.Sprintf("00000000-0000-4000-9000-%012d", i), "order", fmt.Sprintf("m-%d", i), "Placed", "{}"}
	}
	b, err = e.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', 'm', 'Placed', '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CopyFrom(ctx, pgx.Identifier{"public", "outbox"}, []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload"}, pgx.CopyFromRows(mixedRows)); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	txs := e.decode(t)
	if len(txs) != 6 || len(txs[2].inserts) != copyRows || len(txs[5].inserts) != 6 {
		t.Fatalf("decoded %+v", txs)
	}
	c := &copyEnv{takeoverEnv: e, t1: txs[0], t2: txs[1], cp: txs[2], one: txs[3], three: txs[4], mixed: txs[5]}
	for i, l := range c.cp.inserts {
		if l != c.cp.inserts[0] {
			t.Fatalf("COPY row %d at %s, row 0 at %s: the rows of one COPY should share one LSN (one heap_multi_insert record)", i, l, c.cp.inserts[0])
		}
	}
	// pgoutput sends a transaction's Begin at its first change's LSN (from
	// PostgreSQL 15 on, lazily, with that change; before, at the
	// transaction's first WAL record, here the COPY's): so the COPY's rows
	// share their LSN with the Begin, and the mixed transaction's do not.
	if c.cp.begin != c.cp.inserts[0] || c.mixed.begin != c.mixed.inserts[0] || c.mixed.inserts[1] == c.mixed.begin {
		t.Fatalf("COPY transaction: Begin at %s, rows at %s; mixed transaction: Begin at %s, inserts at %v", c.cp.begin, c.cp.inserts[0], c.mixed.begin, c.mixed.inserts)
	}
	e.advance(t, c.t1.end)
	return c
}

// Debezium offsets as its Postgres connector stores them, over a COPY, a
// BEGIN and the other message types, and what walbox plans for each: where
// it starts, and how many events of the offset's transaction it streams
// but does not send again (the rest of that transaction is sent). Before
// this test walbox ignored messageType and lsn_events_processed and took
// every insert at or before lsn as sent: after a Debezium that stopped
// inside a COPY it sent none of the COPY's remaining rows (40 of 50 lost),
// and after an offset stored at a BEGIN it skipped the transaction's first
// event (its only one: the whole transaction lost).
func TestPlanTakeoverOffsetFields(t *testing.T) {
	e := newCopyEnv(t)
	x := e.cp.inserts[0] // every row of the COPY
	type want struct {
		start   pglogrepl.LSN
		skipped int // events of the offset's transaction not sent again
		xid     uint32
		at      int // of them, at the offset's lsn
		// resent is Plan.Resent: the events Debezium had sent that are
		// sent again, -1 when the offset does not tell.
		resent int
		// why, when set, is in Plan.Why.
		why string
	}
	tests := []struct {
		name   string
		offset string
		want   want
	}{
		{
			// Its Begin shares the COPY's LSN: a Debezium 3.7 that
			// restarted from an offset inside the COPY counts that
			// Begin among the events at the LSN (WalPositionLocator's
			// search and skip see every message at it), resends the
			// last row it had counted and stamps it, and each row
			// after it, one more than the rows it has sent. So 10
			// says 9 or 10 rows were sent: 9 are skipped.
			name:   "3.7 stopped inside a COPY that opens its transaction: lsn_events_processed 10, 9 of its 50 rows known sent",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"INSERT","lsn_events_processed":10}`, x, x, e.t2.end, e.cp.xid),
			want:   want{start: e.t2.end, skipped: 9, xid: e.cp.xid, at: 9, resent: -1},
		},
		{
			name:   "3.7 after the last row of a COPY that opens its transaction, before its commit: the last row is sent again",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"INSERT","lsn_events_processed":%d}`, x, x, e.t2.end, e.cp.xid, copyRows),
			want:   want{start: e.t2.end, skipped: copyRows - 1, xid: e.cp.xid, at: copyRows - 1, resent: -1},
		},
		{
			name:   "3.7 after a restarted Debezium's last row of a COPY that opens its transaction (counted once more): sent whole",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"INSERT","lsn_events_processed":%d}`, x, x, e.t2.end, e.cp.xid, copyRows+1),
			want:   want{start: e.cp.end},
		},
		{
			name: "3.7 stopped inside a COPY after its transaction's first insert: exactly 3 of its 5 rows sent",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"INSERT","lsn_events_processed":3}`,
				e.mixed.inserts[1], e.mixed.inserts[1], e.three.end, e.mixed.xid),
			want: want{start: e.three.end, skipped: 4, xid: e.mixed.xid, at: 3},
		},
		{
			name: "3.7 after the last row of a COPY after its transaction's first insert: sent whole",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"INSERT","lsn_events_processed":5}`,
				e.mixed.inserts[1], e.mixed.inserts[1], e.three.end, e.mixed.xid),
			want: want{start: e.mixed.end},
		},
		{
			name:   "3.6 stopped inside a COPY (no lsn_events_processed): only the first row is known to be sent",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"INSERT"}`, x, x, e.t2.end, e.cp.xid),
			want:   want{start: e.t2.end, skipped: 1, xid: e.cp.xid, at: 1, resent: -1},
		},
		{
			name:   "2.0 inside a COPY (no messageType): lsn may be a BEGIN's, none at it taken as sent",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1}`, x, x, e.t2.end, e.cp.xid),
			want:   want{start: e.t2.end, resent: -1},
		},
		{
			name:   "3.6 heartbeat right after the BEGIN of a one-insert transaction",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"BEGIN"}`, e.one.inserts[0], e.cp.end, e.cp.end, e.one.xid),
			want:   want{start: e.cp.end},
		},
		{
			name:   "BEGIN of a three-insert transaction, lsn only",
			offset: fmt.Sprintf(`{"lsn":%d,"txId":%d,"messageType":"BEGIN"}`, e.three.inserts[0], e.three.xid),
			want:   want{start: e.three.inserts[0]},
		},
		{
			name:   "BEGIN of a COPY",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"BEGIN"}`, x, e.t2.end, e.t2.end, e.cp.xid),
			want:   want{start: e.t2.end},
		},
		{
			name:   "3.7, 2 of 3 single inserts sent",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"INSERT","lsn_events_processed":1}`, e.three.inserts[1], e.three.inserts[1], e.one.end, e.three.xid),
			want:   want{start: e.one.end, skipped: 2, xid: e.three.xid, at: 1},
		},
		{
			name:   "3.6, 2 of 3 single inserts sent",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"INSERT"}`, e.three.inserts[1], e.three.inserts[1], e.one.end, e.three.xid),
			want:   want{start: e.one.end, skipped: 2, xid: e.three.xid, at: 1},
		},
		{
			name:   "2.0, 2 of 3 single inserts: the one at lsn is sent again",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d}`, e.three.inserts[1], e.three.inserts[1], e.one.end, e.three.xid),
			want:   want{start: e.one.end, skipped: 1, xid: e.three.xid, resent: -1},
		},
		{
			// The plan said the transaction was not found and "is sent
			// whole", and Resent -1: it committed before the start, and
			// none of it is sent.
			name:   "COMMIT of the COPY (a heartbeat after it, or the transaction metadata's END)",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"COMMIT"}`, e.cp.end, e.cp.end, e.cp.end, e.cp.xid),
			want:   want{start: e.cp.end, why: "none of it is sent again"},
		},
		{
			// Debezium 2.2 to 2.6 without transaction metadata processes
			// a COMMIT without moving lsn or messageType off the last
			// change: only lsn_proc and lsn_commit move to the commit.
			name:   "2.2-2.6 heartbeat after the COMMIT of the COPY: lsn and messageType still the last row's",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"INSERT"}`, x, e.cp.end, e.cp.end, e.cp.xid),
			want:   want{start: e.cp.end, why: "none of it is sent again"},
		},
		{
			name:   "a transactional MESSAGE after the COPY: every row before it sent",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"MESSAGE","lsn_events_processed":%d}`, x+1, x, e.t2.end, e.cp.xid, copyRows),
			want:   want{start: e.cp.end},
		},
		{
			name:   "an unknown messageType: none at lsn taken as sent",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"SOMETHING_NEW","lsn_events_processed":3}`, e.three.inserts[1], e.three.inserts[1], e.one.end, e.three.xid),
			want:   want{start: e.one.end, skipped: 1, xid: e.three.xid, resent: -1},
		},
		{
			name:   "more events processed than the COPY has: all of it",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"INSERT","lsn_events_processed":%d}`, x, x, e.t2.end, e.cp.xid, copyRows+7),
			want:   want{start: e.cp.end},
		},
		{
			name: "transaction metadata and xmin fields do not change the plan",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"INSERT","lsn_events_processed":10,"xmin":5,"transaction_id":"%d:%d","transaction_data_collection_order_public.outbox":10}`,
				x, x, e.t2.end, e.cp.xid, e.cp.xid, x),
			want: want{start: e.t2.end, skipped: 9, xid: e.cp.xid, at: 9, resent: -1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			off, err := debezium.ParseOffset([]byte(tt.offset))
			if err != nil {
				t.Fatal(err)
			}
			p, err := e.plan(t, off)
			if err != nil {
				t.Fatal(err)
			}
			var upTo pglogrepl.LSN
			if tt.want.xid != 0 {
				upTo = off.LSN
			}
			if p.Start != tt.want.start || p.Skipped != tt.want.skipped || p.SkipXID != tt.want.xid || p.SkipAtUpTo != tt.want.at || p.SkipUpTo != upTo || p.Resent != tt.want.resent ||
				!strings.Contains(p.Why, tt.want.why) {
				t.Errorf("%s:\nplan start %s, skipped %d of xid %d (%d at %s), resent %d (%s)\nwant start %s, skipped %d of xid %d (%d at %s), resent %d (saying %q)",
					tt.offset, p.Start, p.Skipped, p.SkipXID, p.SkipAtUpTo, p.SkipUpTo, p.Resent, p.Why, tt.want.start, tt.want.skipped, tt.want.xid, tt.want.at, upTo, tt.want.resent, tt.want.why)
			}
		})
	}
}

// Offsets walbox refuses, naming the field: an incremental snapshot that
// was running (its remaining rows would never be sent: the EventRouter
// routes a snapshot's reads of the outbox as events), a field walbox does
// not know, and fields of the wrong type. walbox dropped each silently
// before.
func TestPlanTakeoverOffsetRefused(t *testing.T) {
	e := newCopyEnv(t)
	x := e.cp.inserts[0]
	tests := []struct {
		name    string
		offset  string
		wantErr error
		want    string
	}{
		{
			name: "running incremental snapshot",
			offset: fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"messageType":"INSERT","incremental_snapshot_collections":"[{\"incremental_snapshot_collections_id\":\"public.outbox\"}]","incremental_snapshot_primary_key":"aced0005","incremental_snapshot_maximum_key":"aced0005","incremental_snapshot_correlation_id":null}`,
				x, x, e.t2.end, e.cp.xid),
			wantErr: debezium.ErrTakeover, want: "incremental_snapshot_collections",
		},
		{
			name:    "unknown field",
			offset:  fmt.Sprintf(`{"lsn":%d,"lsn_commit":%d,"txId":%d,"messageType":"INSERT","lsn_events_skipped":3}`, x, e.t2.end, e.cp.xid),
			wantErr: debezium.ErrOffsets, want: `"lsn_events_skipped"`,
		},
		{
			name:    "lsn_events_processed not a number",
			offset:  fmt.Sprintf(`{"lsn":%d,"txId":%d,"messageType":"INSERT","lsn_events_processed":"ten"}`, x, e.cp.xid),
			wantErr: debezium.ErrOffsets, want: `"lsn_events_processed"`,
		},
		{
			name:    "lsn_events_processed negative",
			offset:  fmt.Sprintf(`{"lsn":%d,"txId":%d,"messageType":"INSERT","lsn_events_processed":-1}`, x, e.cp.xid),
			wantErr: debezium.ErrOffsets, want: `"lsn_events_processed"`,
		},
		{
			name:    "messageType not a string",
			offset:  fmt.Sprintf(`{"lsn":%d,"txId":%d,"messageType":4}`, x, e.cp.xid),
			wantErr: debezium.ErrOffsets, want: `"messageType"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			off, err := debezium.ParseOffset([]byte(tt.offset))
			if err == nil {
				_, err = e.plan(t, off)
			}
			if !errors.Is(err, tt.wantErr) || !strings.Contains(fmt.Sprint(err), tt.want) {
				t.Errorf("%s: err = %v, want %v naming %s", tt.offset, err, tt.wantErr, tt.want)
			}
		})
	}
}
