package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
)

// TestReplayFallbackBoundary: a replay that falls back for X (too large for
// its spool) starts its stream again on a copied temporary slot from the end
// of the last transaction it handled. Around that boundary nothing is
// skipped or sent twice: Z committed while X was open (handled before the
// fallback, X fitting in the spool until then), Y streamed while X was open
// and committed after it, one more after both. Commit order, each event
// once.
func TestReplayFallbackBoundary(t *testing.T) {
	fulltest.Require(t, "interleaved transactions around a replay's fallback; the short run falls back on sequential ones")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := pgtest.Start(t, smallWorkMem)
	conns := make([]*pgx.Conn, 3)
	for i := range conns {
		c, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		conns[i] = c
	}
	conn := conns[0]
	setupReplaySource(ctx, t, conn)
	gen := outboxtest.NewGenerator(47, 10)
	begin := func(c *pgx.Conn) pgx.Tx {
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return tx
	}
	copyTo := func(tx pgx.Tx, evs []outboxtest.Event) {
		if err := copyEvents(ctx, tx, evs); err != nil {
			t.Fatal(err)
		}
	}
	x, y := begin(conns[1]), begin(conns[2])
	x1, z, y1, x2, y2, last := gen.Batch(1_000), gen.Batch(10), gen.Batch(500), gen.Batch(5_000), gen.Batch(500), gen.Batch(1)
	copyTo(x, x1)
	if err := outboxtest.WriteTx(ctx, conn, z); err != nil {
		t.Fatal(err)
	}
	copyTo(y, y1)
	copyTo(x, x2)
	copyTo(y, y2)
	if err := x.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := y.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.WriteTx(ctx, conn, last); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, b := range [][]outboxtest.Event{z, x1, x2, y1, y2, last} {
		for _, ev := range b {
			want = append(want, ev.ID)
		}
	}
	commits := commitLSNs(ctx, t, conn)
	if len(commits) != 4 {
		t.Fatalf("found %d commits, want 4", len(commits))
	}
	if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot('peek')`); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := &ackingProducer{}
	res, err := pipeline.Replay(ctx, pipeline.ReplayConfig{
		ConnString: srv.DSN("postgres"), Publication: "walbox", Slot: "walbox_replay", Tables: []string{"public.outbox"},
		Range: pipeline.Range{FromLSN: commits[0], ToLSN: commits[3]}, From: commits[0].String(), StatusInterval: 50 * time.Millisecond,
		SpoolDir: t.TempDir(), SpoolMaxBytes: 1 << 20,
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
	if fmt.Sprint(got) != fmt.Sprint(want) {
		seen := map[string]int{}
		for _, id := range got {
			seen[id]++
		}
		missing, twice := 0, 0
		for _, id := range want {
			switch seen[id] {
			case 0:
				missing++
			case 1:
			default:
				twice++
			}
		}
		t.Fatalf("replayed %d events, want %d in commit order (%d missing, %d more than once)", len(got), len(want), missing, twice)
	}
	t.Logf("replayed %d events, %d transactions streamed", len(got), res.Streamed)
}
