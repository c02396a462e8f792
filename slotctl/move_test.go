package slotctl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/slotctl"
)

func TestParseLSN(t *testing.T) {
	tests := []struct {
		in      string
		want    pglogrepl.LSN
		wantErr bool
	}{
		{in: "16/B374D848", want: 0x16_B374D848},
		{in: "0/0", want: 0},
		{in: "ffffffff/ffffffff", want: 0xFFFFFFFF_FFFFFFFF},
		{in: "", wantErr: true},
		{in: "16-B374D848", wantErr: true},
		{in: "16/B374D848 ", wantErr: true},
		{in: "123456789/0", wantErr: true},
		{in: "0x16/0", wantErr: true},
		{in: "16/", wantErr: true},
		{in: "380929160", wantErr: true}, // a bare number: the form is hi/lo
	}
	for _, tt := range tests {
		got, err := slotctl.ParseLSN(tt.in)
		if tt.wantErr {
			if !errors.Is(err, slotctl.ErrInvalidConfig) || !strings.Contains(err.Error(), "16/B374D848") {
				t.Errorf("ParseLSN(%q) = %v, %v; want ErrInvalidConfig naming the form 16/B374D848", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseLSN(%q) = %s, %v; want %s", tt.in, got, err, tt.want)
		}
	}
}

// insertTx commits one transaction of n outbox rows.
func insertTx(t *testing.T, e env, n int) {
	t.Helper()
	if _, err := e.conn.Exec(ctxT(t), `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
		SELECT 'order', 'o' || i, 'created', '{}' FROM generate_series(1, $1) i`, n); err != nil {
		t.Fatal(err)
	}
}

// commits peeks slot (without consuming it) and returns each streamed
// transaction's commit LSN (Begin's FinalLSN) and its number of inserts.
func commits(t *testing.T, e env, slot string) (lsns []pglogrepl.LSN, inserts []int) {
	t.Helper()
	rows, err := e.conn.Query(ctxT(t), `SELECT data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL,
		'proto_version', '1', 'publication_names', 'walbox')`, slot)
	if err != nil {
		t.Fatal(err)
	}
	datas, err := pgx.CollectRows(rows, pgx.RowTo[[]byte])
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range datas {
		switch d[0] {
		case 'B':
			m, err := pglogrepl.Parse(d)
			if err != nil {
				t.Fatal(err)
			}
			lsns = append(lsns, m.(*pglogrepl.BeginMessage).FinalLSN)
			inserts = append(inserts, 0)
		case 'I':
			inserts[len(inserts)-1]++
		}
	}
	return lsns, inserts
}

// TestCountEventsMatchesAdvance: for targets on and around each commit,
// the events CountEvents says advancing skips are exactly those that
// advancing makes the slot never stream: counted + still streamed = all.
func TestCountEventsMatchesAdvance(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql")
	ctx := ctxT(t)
	if _, err := slotctl.CreateSlot(ctx, e.conn, e.db); err != nil {
		t.Fatal(err)
	}
	sizes := []int{3, 1, 4, 2}
	for _, n := range sizes {
		insertTx(t, e, n)
	}
	lsns, inserts := commits(t, e, e.db)
	if fmt.Sprint(inserts) != fmt.Sprint(sizes) {
		t.Fatalf("streamed transactions %v, want %v", inserts, sizes)
	}
	end, err := slotctl.CurrentWALLSN(ctx, e.conn)
	if err != nil {
		t.Fatal(err)
	}
	targets := []pglogrepl.LSN{end}
	for _, l := range lsns {
		targets = append(targets, l-1, l, l+1)
	}
	for i, to := range targets {
		t.Run(to.String(), func(t *testing.T) {
			cp := fmt.Sprintf("%s_c%d", e.db, i)
			if _, err := slotctl.CopySlot(ctx, e.conn, e.db, cp); err != nil {
				t.Fatal(err)
			}
			defer e.exec(t, fmt.Sprintf("SELECT pg_drop_replication_slot('%s')", cp))
			counted, err := slotctl.CountEvents(ctx, e.conn, cp, slotctl.Events{}, to)
			if err != nil {
				t.Fatal(err)
			}
			// What the rule says: transactions whose commit starts before to.
			want := 0
			for j, l := range lsns {
				if l < to {
					want += inserts[j]
				}
			}
			if counted != int64(want) {
				t.Errorf("CountEvents(to %s) = %d, want %d", to, counted, want)
			}
			got, err := slotctl.Advance(ctx, e.conn, cp, to)
			if err != nil {
				t.Fatal(err)
			}
			if got != to {
				t.Errorf("Advance() = %s, want %s", got, to)
			}
			_, left := commits(t, e, cp)
			streamed := 0
			for _, n := range left {
				streamed += n
			}
			if total := 10; int(counted)+streamed != total {
				t.Errorf("counted %d skipped + %d still streamed != %d written", counted, streamed, total)
			}
		})
	}
	// Counting consumed nothing: the slot still streams every transaction.
	if _, after := commits(t, e, e.db); fmt.Sprint(after) != fmt.Sprint(sizes) {
		t.Errorf("slot streams %v after the counts, want %v", after, sizes)
	}
}

// TestAdvanceStopsAtWALEnd: the server does not move a slot past its WAL;
// Advance returns where it stopped.
func TestAdvanceStopsAtWALEnd(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql")
	ctx := ctxT(t)
	if _, err := slotctl.CreateSlot(ctx, e.conn, e.db); err != nil {
		t.Fatal(err)
	}
	insertTx(t, e, 1)
	got, err := slotctl.Advance(ctx, e.conn, e.db, 0xFFFF_00000000)
	if err != nil {
		t.Fatal(err)
	}
	end, err := slotctl.CurrentWALLSN(ctx, e.conn)
	if err != nil {
		t.Fatal(err)
	}
	if got > end || got == 0 {
		t.Errorf("Advance(FFFF/0) = %s, want at most the WAL end %s", got, end)
	}
}

// killAfterCopy is a connection that dies right after CountEvents made its
// temporary copy: the next statement finds the session terminated.
type killAfterCopy struct {
	slotctl.Querier
	killer *pgx.Conn
	pid    uint32
	killed bool
}

func (k *killAfterCopy) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := k.Querier.Exec(ctx, sql, args...)
	if err == nil && strings.Contains(sql, "pg_copy_logical_replication_slot") {
		if _, kerr := k.killer.Exec(ctx, "SELECT pg_terminate_backend($1)", k.pid); kerr != nil {
			return tag, kerr
		}
		k.killed = true
	}
	return tag, err
}

// TestCountEventsConnectionDies: if slotctl or its connection dies while
// counting, after the temporary copy was made, the server drops the copy
// with the session: no slot is left behind holding WAL.
func TestCountEventsConnectionDies(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql")
	ctx := ctxT(t)
	if _, err := slotctl.CreateSlot(ctx, e.conn, e.db); err != nil {
		t.Fatal(err)
	}
	insertTx(t, e, 2)
	victim := e.connectAs(t, "postgres")
	q := &killAfterCopy{Querier: victim, killer: e.conn, pid: victim.PgConn().PID()}
	if _, err := slotctl.CountEvents(ctx, q, e.db, slotctl.Events{}, 0); !errors.Is(err, slotctl.ErrCannotCount) {
		t.Fatalf("CountEvents on a dying connection = %v, want ErrCannotCount", err)
	}
	if !q.killed {
		t.Fatal("the connection was not terminated after the copy")
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		var left []string
		rows, err := e.conn.Query(ctx, "SELECT slot_name::text FROM pg_replication_slots WHERE slot_name LIKE 'slotctl_count_%'")
		if err != nil {
			t.Fatal(err)
		}
		if left, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
			t.Fatal(err)
		}
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("temporary copies left after their session died: %v", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The slot itself is untouched.
	if n, err := slotctl.CountEvents(ctx, e.conn, e.db, slotctl.Events{}, 0); err != nil || n != 2 {
		t.Errorf("CountEvents() after the crash = %d, %v; want 2", n, err)
	}
}

// TestCountEventsOnlyOutboxTables: an insert into another table of the
// publication is not an event (walbox does not route it), and a message
// is one only with the prefix and inside a transaction (issue 17, item 5).
func TestCountEventsOnlyOutboxTables(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql")
	ctx := ctxT(t)
	e.exec(t, "CREATE TABLE other (id int)", "ALTER PUBLICATION walbox ADD TABLE other")
	if _, err := slotctl.CreateSlot(ctx, e.conn, e.db); err != nil {
		t.Fatal(err)
	}
	insertTx(t, e, 2)
	e.exec(t, "INSERT INTO other SELECT generate_series(1, 5)",
		"SELECT pg_logical_emit_message(true, 'ob', 'a')",
		"SELECT pg_logical_emit_message(false, 'ob', 'b')",
		"SELECT pg_logical_emit_message(true, 'obx', 'c')")
	for _, tt := range []struct {
		ev   slotctl.Events
		want int64
	}{
		{slotctl.Events{}, 2},
		{slotctl.Events{MessagePrefix: "ob"}, 3},
		{slotctl.Events{Table: "public.outbox,public.other"}, 7},
	} {
		if n, err := slotctl.CountEvents(ctx, e.conn, e.db, tt.ev, 0); err != nil || n != tt.want {
			t.Errorf("CountEvents(%+v) = %d, %v; want %d", tt.ev, n, err, tt.want)
		}
	}
}

// TestServerRefusesBackwardAdvance: what ErrAdvanceBackwards' comment
// says of the server (it used to say the server silently ignores a
// backward advance; it refuses it with SQLSTATE 55000). Issue 17, item 9.
func TestServerRefusesBackwardAdvance(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql")
	ctx := ctxT(t)
	s, err := slotctl.CreateSlot(ctx, e.conn, e.db)
	if err != nil {
		t.Fatal(err)
	}
	insertTx(t, e, 1)
	end, err := slotctl.CurrentWALLSN(ctx, e.conn)
	if err != nil {
		t.Fatal(err)
	}
	e.exec(t, fmt.Sprintf("SELECT pg_replication_slot_advance('%s', '%s')", e.db, end))
	_, err = e.conn.Exec(ctx, "SELECT pg_replication_slot_advance($1, $2::pg_lsn)", e.db, s.ConfirmedFlushLSN.String())
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "55000" || !strings.Contains(pgErr.Message, "minimum is") {
		t.Fatalf("backward pg_replication_slot_advance = %v, want SQLSTATE 55000 naming the minimum", err)
	}
	if _, err := slotctl.Advance(ctx, e.conn, e.db, s.ConfirmedFlushLSN); !errors.Is(err, slotctl.ErrAdvanceBackwards) {
		t.Fatalf("Advance backwards = %v, want ErrAdvanceBackwards", err)
	}
}
