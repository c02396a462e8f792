package snapshot_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
)

// failing refuses every record, as Kafka refusing the snapshot would; the
// process "dies" with the snapshot unfinished.
type failing struct{ n int }

func (f *failing) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	f.n++
	promise(r, errors.New("broker says no"))
}
func (f *failing) Flush(context.Context) error { return nil }

type stateEnv struct {
	t    *testing.T
	ctx  context.Context
	dsn  string
	conn *pgx.Conn
	rt   *router.Router
}

func newStateEnv(t *testing.T, opts ...func(*pgtest.Options)) *stateEnv {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	pg := pgtest.Start(t, opts...)
	e := &stateEnv{t: t, ctx: ctx, dsn: pg.DSN("postgres")}
	var err error
	if e.conn, err = pgx.Connect(ctx, e.dsn); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.conn.Close(context.Background()) })
	e.exec(tableDDL)
	e.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, body, sent_at)
SELECT 'order', 'ord-' || (g % 7), 'E', jsonb_build_object('n', g), '\x00', CASE WHEN g % 3 = 0 THEN now() END
FROM generate_series(1, 30) g`) // 20 pending, 10 sent
	if e.rt, err = router.New(router.Config{}); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *stateEnv) exec(sql string, args ...any) {
	e.t.Helper()
	if _, err := e.conn.Exec(e.ctx, sql, args...); err != nil {
		e.t.Fatalf("%s: %v", sql, err)
	}
}

func (e *stateEnv) comment() string {
	e.t.Helper()
	var c string
	if err := e.conn.QueryRow(e.ctx, `SELECT COALESCE(obj_description(oid, 'pg_publication'), '') FROM pg_publication WHERE pubname = 'walbox'`).Scan(&c); err != nil {
		e.t.Fatal(err)
	}
	return c
}

func (e *stateEnv) takeover(p snapshot.Producer) (snapshot.Result, error) {
	return snapshot.Takeover(e.ctx, snapshot.Options{
		ConnString: e.dsn,
		Slotctl:    slotctl.Config{CreateOnFirstStart: true},
		Snapshot:   snapshot.Config{Mode: snapshot.ModePending, Where: "sent_at IS NULL", Order: []string{"id"}, BatchRows: 7},
		Router:     e.rt, Producer: p, SlotBusyTimeout: 10 * time.Second,
	})
}

// TestTakeoverStates walks the takeover's durable states: a snapshot that
// failed half way is recorded on the publication, a start without
// --snapshot then refuses to stream, the next takeover drops the untouched
// slot and takes the whole snapshot again in order, and a start after it
// finished takes none.
//
// It runs on every installed version: CREATE_REPLICATION_SLOT ...
// EXPORT_SNAPSHOT and SET TRANSACTION SNAPSHOT are what the takeover
// depends on.
func TestTakeoverStates(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		testTakeoverStates(t, newStateEnv(t, pgtest.WithBinDir(v.BinDir)))
	})
}

func testTakeoverStates(t *testing.T, e *stateEnv) {

	// 1. Kafka refuses the snapshot: the slot exists, the marker stays
	// with the consistent point.
	res, err := e.takeover(&failing{})
	if !errors.Is(err, snapshot.ErrProduce) {
		t.Fatalf("takeover with a refusing producer: %v, want ErrProduce", err)
	}
	first := e.comment()
	if !strings.HasPrefix(first, snapshot.SnapshotMarker("walbox")+" from ") {
		t.Fatalf("publication comment %q after an unfinished snapshot, want the snapshot marker with its LSN", first)
	}
	pending, err := snapshot.Pending(e.ctx, e.dsn, "walbox", "walbox")
	if err != nil || !pending {
		t.Fatalf("Pending = %v, %v; want true", pending, err)
	}
	_ = res

	// 2. The next takeover starts over: all 20 pending rows, in id order.
	e.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, body) VALUES ('order', 'ord-1', 'E', '{"n": 31}', '\x00')`)
	c := &capture{}
	res, err = e.takeover(c)
	if err != nil {
		t.Fatalf("second takeover: %v", err)
	}
	if !res.Taken || !res.Redone || res.Stats.Produced != 21 {
		t.Fatalf("second takeover %+v, want the snapshot redone with 21 rows", res)
	}
	last := -1
	for _, r := range c.records() {
		var n int
		for _, h := range r.Headers {
			if h.Key == "event_id" {
				n = atoi(t, string(h.Value))
			}
		}
		if n <= last || n%3 == 0 {
			t.Fatalf("snapshot sent id %d after %d (want ascending ids of unsent rows only)", n, last)
		}
		last = n
	}
	if got := e.comment(); !strings.HasPrefix(got, "walbox: slot walbox snapshot finished at ") {
		t.Fatalf("publication comment %q after the snapshot finished, want the finished marker", got)
	}
	if pending, _ := snapshot.Pending(e.ctx, e.dsn, "walbox", "walbox"); pending {
		t.Fatal("Pending after the snapshot finished")
	}

	// 3. A restart with --snapshot still set takes none.
	c2 := &capture{}
	res, err = e.takeover(c2)
	if err != nil || res.Taken || len(c2.records()) != 0 {
		t.Fatalf("takeover after a finished one: %+v, %v, %d records; want no snapshot", res, err, len(c2.records()))
	}
}

// TestTakeoverRefusesAStreamedSlot: if something confirmed a position on
// the slot of an unfinished snapshot, dropping it could reorder events;
// the takeover refuses and says how to decide.
func TestTakeoverRefusesAStreamedSlot(t *testing.T) {
	e := newStateEnv(t)
	if _, err := e.takeover(&failing{}); !errors.Is(err, snapshot.ErrProduce) {
		t.Fatalf("first takeover: %v", err)
	}
	e.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, body) VALUES ('order', 'ord-1', 'E', '{}', '\x00')`)
	e.exec(`SELECT pg_replication_slot_advance('walbox', pg_current_wal_lsn())`)
	_, err := e.takeover(&capture{})
	if !errors.Is(err, snapshot.ErrSnapshotPending) || !strings.Contains(err.Error(), "COMMENT ON PUBLICATION") {
		t.Fatalf("takeover of a streamed slot: %v, want ErrSnapshotPending with the fix", err)
	}
	var n int
	if err := e.conn.QueryRow(e.ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("slot count %d (%v): the refused takeover must leave the slot alone", n, err)
	}
}

// TestTakeoverMarkerWithoutSlot: a process that died after writing the
// marker and before creating the slot; the next takeover creates it, even
// though the publication no longer carries the first start's marker.
func TestTakeoverMarkerWithoutSlot(t *testing.T) {
	e := newStateEnv(t)
	e.exec(`CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')`)
	e.exec(`COMMENT ON PUBLICATION walbox IS '` + snapshot.SnapshotMarker("walbox") + `'`)
	c := &capture{}
	res, err := e.takeover(c)
	if err != nil || !res.Taken || res.Stats.Produced != 20 {
		t.Fatalf("takeover: %+v, %v; want the slot created and 20 rows sent", res, err)
	}
	// Without the marker, an admin-made publication and no slot is not a
	// first start: refused as by walbox run without --snapshot.
	e.exec(`SELECT pg_drop_replication_slot('walbox')`)
	if _, err := e.takeover(&capture{}); !errors.Is(err, slotctl.ErrSlotVanished) {
		t.Fatalf("takeover with a vanished slot: %v, want ErrSlotVanished", err)
	}
	// --create-slot: the operator says creating it is right; the takeover
	// then creates it with a snapshot.
	res, err = snapshot.Takeover(e.ctx, snapshot.Options{
		ConnString: e.dsn,
		Slotctl:    slotctl.Config{CreateMissing: true},
		Snapshot:   snapshot.Config{Mode: snapshot.ModeAll, Order: []string{"id"}},
		Router:     e.rt, Producer: &capture{},
	})
	if err != nil || !res.Taken || res.Stats.Produced != 30 {
		t.Fatalf("takeover with --create-slot: %+v, %v; want the slot created and all 30 rows sent", res, err)
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("event id %q is not a number", s)
		}
		n = n*10 + int(r-'0')
	}
	return n
}

// TestTakeoverSlotWithoutLSN: a process that died after creating the slot
// and before recording its consistent point; nothing streamed from the
// slot, so the next takeover drops it and takes the snapshot again.
func TestTakeoverSlotWithoutLSN(t *testing.T) {
	e := newStateEnv(t)
	e.exec(`CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')`)
	e.exec(`COMMENT ON PUBLICATION walbox IS '` + snapshot.SnapshotMarker("walbox") + `'`)
	e.exec(`SELECT pg_create_logical_replication_slot('walbox', 'pgoutput')`)
	c := &capture{}
	res, err := e.takeover(c)
	if err != nil || !res.Taken || !res.Redone || res.Stats.Produced != 20 {
		t.Fatalf("takeover: %+v, %v; want the slot recreated and 20 rows sent", res, err)
	}
	if got := e.comment(); !strings.HasPrefix(got, "walbox: slot walbox snapshot finished at ") {
		t.Fatalf("comment %q after the takeover, want the finished marker", got)
	}
}
