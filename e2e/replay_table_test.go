package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
)

// TestReplayFromTable: batches A, B and C are committed to the outbox with
// ids that grow in commit order (as UUIDv7 ids do); no walbox run, no
// trailing slot. `walbox replay --from-table --from-id <first of B>
// --to-id <last of B> --topic replay_b.{aggregate_type}`, the built binary
// against a real Kafka broker, delivers exactly B's events, each once, in
// per-aggregate order, with their key, headers and walbox_replay: true,
// none of A or C, and prints the per-topic counts. A replay parked inside
// its snapshot (unreachable broker) holds only an ACCESS SHARE lock on the
// outbox and does not hold up writers; a SIGKILL then leaves no session,
// snapshot or slot behind, and walbox's slot is never touched.
func TestReplayFromTable(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	broker := kafkatest.Start(t, kafkatest.WithPartitions(3))
	f := newFixture(t, broker.Addrs())
	conn, err := pgx.Connect(ctx, f.pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	e := &replayEnv{fixture: f, conn: conn}
	env := append(f.env, "WALBOX_LOG_FORMAT=text")

	gen := outboxtest.NewGenerator(11, 5)
	n := 0
	ordered := func(evs []outboxtest.Event) []outboxtest.Event {
		for i := range evs {
			n++
			evs[i].ID = fmt.Sprintf("0190%04x-0000-7000-8000-%012x", n, n) // time-ordered, like UUIDv7
		}
		return evs
	}
	batch := func(txns, per int) []outboxtest.Event {
		var all []outboxtest.Event
		for range txns {
			evs := ordered(gen.Batch(per))
			if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
				t.Fatal(err)
			}
			all = append(all, evs...)
		}
		return all
	}
	a := batch(4, 5)
	b := batch(6, 4)
	c := batch(4, 5)
	slotBefore := e.slotLSN(t, "walbox")
	wantCounts := map[string]int{}
	for _, ev := range b {
		wantCounts[ev.AggregateType]++
	}

	prefix := "replay_b."
	res := runReplay(t, env, "--from-table", "--from-id", b[0].ID, "--to-id", b[len(b)-1].ID, "--topic", prefix+"{aggregate_type}")
	t.Logf("walbox replay --from-table:\nstdout:\n%sstderr (end):\n%s", res.stdout, tail(res.stderr, 400))
	if res.code != 0 {
		t.Fatalf("walbox replay --from-table exited %d:\n%s", res.code, res.stderr)
	}
	for typ, n := range wantCounts {
		if !containsCount(res.stdout, prefix+typ, n) {
			t.Errorf("stdout does not report %d events for %s:\n%s", n, prefix+typ, res.stdout)
		}
	}
	cons, err := outboxtest.NewConsumer(broker.Addrs(), `replay_b\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	rctx, rcancel := context.WithTimeout(ctx, time.Minute)
	defer rcancel()
	got, err := cons.ReadUntil(rctx, func(r []outboxtest.Received) bool { return len(r) >= len(b) })
	if err != nil {
		t.Fatalf("reading the replay: %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	extra, _ := cons.Poll(pctx)
	pcancel()
	got = append(got, extra...)
	if len(got) != len(b) {
		t.Errorf("got %d records, want the %d of B", len(got), len(b))
	}
	checkReplayed(t, b, append(a, c...), got, prefix)
	for _, r := range got {
		if r.Headers["trace_id"] == "" {
			t.Errorf("event %s lost its row headers: %v", r.Headers["event_id"], r.Headers)
		}
	}

	t.Run("SIGKILL leaves nothing behind", func(t *testing.T) {
		// An unreachable broker and one record in flight park the replay
		// inside its snapshot transaction.
		kenv := append(append([]string(nil), env...), "WALBOX_KAFKA_BROKERS=127.0.0.1:1", "WALBOX_MAX_INFLIGHT_RECORDS=1")
		p := startReplay(t, kenv, "--from-table", "--where", "true", "--topic", "replay_killed.{aggregate_type}")
		sessions := func() int {
			var k int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'FETCH % FROM walbox_rows' OR query LIKE 'DECLARE walbox_rows%'`).Scan(&k); err != nil {
				t.Fatal(err)
			}
			return k
		}
		waitUntil(ctx, t, time.Minute, "the replay's snapshot transaction", func() bool { return sessions() == 1 })
		// Parked means past its DECLARE: on a loaded machine the session
		// may still show it (its locks are then not yet the FETCH's).
		waitUntil(ctx, t, time.Minute, "the replay's first FETCH", func() bool {
			var k int
			if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'FETCH % FROM walbox_rows'`).Scan(&k); err != nil {
				t.Fatal(err)
			}
			return k == 1
		})
		// Parked inside its snapshot, it holds only the ACCESS SHARE lock
		// of a SELECT on the outbox, and writers are not held up.
		var modes []string
		if err := conn.QueryRow(ctx, `SELECT coalesce(array_agg(DISTINCT l.mode), '{}') FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE a.query LIKE 'FETCH % FROM walbox_rows' AND l.locktype = 'relation' AND l.relation = 'public.outbox'::regclass`).Scan(&modes); err != nil {
			t.Fatal(err)
		}
		if len(modes) != 1 || modes[0] != "AccessShareLock" {
			t.Errorf("the replay holds %v on the outbox, want only AccessShareLock", modes)
		}
		if _, err := conn.Exec(ctx, `SET lock_timeout = '5s'`); err != nil {
			t.Fatal(err)
		}
		if err := outboxtest.WriteTx(ctx, conn, ordered(gen.Batch(3))); err != nil {
			t.Errorf("writing to the outbox during the replay: %v", err)
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		waitUntil(ctx, t, 30*time.Second, "the killed replay's session to end", func() bool { return sessions() == 0 })
		if tmp := e.temporarySlots(t); len(tmp) != 0 {
			t.Errorf("slots left behind: %v", tmp)
		}
	})
	if got := e.slotLSN(t, "walbox"); got != slotBefore {
		t.Errorf("walbox's slot moved from %s to %s", slotBefore, got)
	}
	if !strings.Contains(res.stderr, fmt.Sprintf("%d of %d matching rows sent", len(b), len(b))) {
		t.Errorf("stderr does not sum up the replay:\n%s", tail(res.stderr, 400))
	}
}
