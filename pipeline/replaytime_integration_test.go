package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// TestReplayToTimeIsExact: commit timestamps are taken before the commit
// record is written, so WAL order is not commit-time order. A replay with
// --to TIME used to stop at the first transaction that committed more
// than 1 s after TIME, and so missed a later one (in WAL order) that
// committed before TIME. It now reads to the server's position at start
// and replays every transaction whose commit time is in the range (issue
// 17, item 7). Commit times out of WAL order are made with a replication
// origin's timestamp, which logical decoding reports as the commit time.
func TestReplayToTimeIsExact(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	cfg := slotctl.Config{Table: "public.outbox", Slot: "walbox_replay", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, cfg); err != nil {
		t.Fatal(err)
	}
	base := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	gen := outboxtest.NewGenerator(3, 4)
	var ids [][]string
	commitAt := func(at time.Time) {
		t.Helper()
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, `SELECT pg_replication_origin_xact_setup('0/1', $1)`, at); err != nil {
			t.Fatal(err)
		}
		evs := gen.Batch(2)
		for _, e := range evs {
			if _, err := tx.Exec(ctx, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, $3, $4, $5)`,
				e.ID, e.AggregateType, e.AggregateID, e.EventType, string(e.Payload)); err != nil {
				t.Fatal(err)
			}
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, ev := range evs {
			got = append(got, ev.ID)
		}
		ids = append(ids, got)
	}
	for _, sql := range []string{`SELECT pg_replication_origin_create('fake')`, `SELECT pg_replication_origin_session_setup('fake')`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	commitAt(base.Add(-time.Minute))     // 0: in range
	commitAt(base.Add(10 * time.Second)) // 1: after --to, before 2 in WAL order
	commitAt(base)                       // 2: in range
	if _, err := conn.Exec(ctx, `SELECT pg_replication_origin_session_reset()`); err != nil {
		t.Fatal(err)
	}

	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := &ackingProducer{}
	_, err = pipeline.Replay(ctx, pipeline.ReplayConfig{
		ConnString: srv.DSN("postgres"), Publication: "walbox", Slot: "walbox_replay", Tables: []string{"public.outbox"},
		Range: pipeline.Range{FromTime: base.Add(-time.Minute), ToTime: base.Add(time.Second)}, From: "time",
		StatusInterval: 50 * time.Millisecond,
	}, p, rt, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.recs {
		for _, h := range r.Headers {
			if h.Key == "event_id" {
				got = append(got, string(h.Value))
			}
		}
	}
	if want := append(append([]string{}, ids[0]...), ids[2]...); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("replayed %v\nwant     %v (transactions 0 and 2, whose commit times are in the range)", got, want)
	}
}
