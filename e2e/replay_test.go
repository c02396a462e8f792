package e2e

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
)

// replayEnv is a Postgres with the outbox and walbox's slot, a real Kafka
// broker, and an admin connection.
type replayEnv struct {
	*fixture
	conn *pgx.Conn
}

func (e *replayEnv) lsn(t *testing.T, sql string, args ...any) pglogrepl.LSN {
	t.Helper()
	var s *string
	err := e.conn.QueryRow(context.Background(), sql, args...).Scan(&s)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		t.Fatalf("%s: %v", sql, err)
	}
	if s == nil {
		return 0
	}
	lsn, err := pglogrepl.ParseLSN(*s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func (e *replayEnv) slotLSN(t *testing.T, slot string) pglogrepl.LSN {
	t.Helper()
	return e.lsn(t, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot)
}

func (e *replayEnv) currentLSN(t *testing.T) pglogrepl.LSN {
	t.Helper()
	return e.lsn(t, `SELECT pg_current_wal_lsn()::text`)
}

func (e *replayEnv) now(t *testing.T) time.Time {
	t.Helper()
	var at time.Time
	if err := e.conn.QueryRow(context.Background(), `SELECT clock_timestamp()`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	return at
}

func (e *replayEnv) temporarySlots(t *testing.T) []string {
	t.Helper()
	rows, err := e.conn.Query(context.Background(), `SELECT slot_name::text FROM pg_replication_slots WHERE temporary`)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// batch commits txns transactions of per events each and returns the events.
func (e *replayEnv) batch(t *testing.T, gen *outboxtest.Generator, txns, per int) []outboxtest.Event {
	t.Helper()
	var all []outboxtest.Event
	for range txns {
		evs := gen.Batch(per)
		if err := outboxtest.WriteTx(context.Background(), e.conn, evs); err != nil {
			t.Fatal(err)
		}
		all = append(all, evs...)
	}
	return all
}

// startReplay starts `walbox replay args...` with stdout kept apart.
func startReplay(t *testing.T, env []string, args ...string) *biProc {
	t.Helper()
	out := &logbuf.Buffer{}
	return &biProc{proc: startWalboxOut(t, env, out, append([]string{"replay"}, args...)...), stdout: out}
}

func runReplay(t *testing.T, env []string, args ...string) biResult {
	t.Helper()
	return waitExit(t, startReplay(t, env, args...), 2*time.Minute)
}

// TestReplayRange: walbox run --replay-window keeps a trailing slot; batches
// A, B and C are written and confirmed by the live slot; walbox replay then
// sends exactly B again, by LSN and by time, to separate topics through
// --topic: every event of B in order with the replay header, none of A or C.
// Neither the live nor the trailing slot moves, and no temporary slot is
// left, also after a SIGKILL of walbox replay mid-stream. A range older
// than the window, a malformed LSN and a missing trailing slot are refused.
func TestReplayRange(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
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

	run := startWalbox(t, append(env, "WALBOX_REPLAY_WINDOW=1h"))
	waitUntil(ctx, t, time.Minute, "the trailing slot", func() bool { return e.slotLSN(t, "walbox_replay") != 0 })
	waitUntil(ctx, t, time.Minute, "walbox to stream", func() bool { return strings.Contains(run.stderr.String(), "msg=streaming") })

	gen := outboxtest.NewGenerator(8, 6)
	a := e.batch(t, gen, 4, 5)
	afterA, timeA := e.currentLSN(t), e.now(t)
	b := e.batch(t, gen, 5, 4)
	afterB, timeB := e.currentLSN(t), e.now(t)
	c := e.batch(t, gen, 4, 5)
	afterC := e.currentLSN(t)
	waitUntil(ctx, t, time.Minute, "the live slot to confirm A, B and C", func() bool { return e.slotLSN(t, "walbox") >= afterC })
	if code := run.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox run exited %d", code)
	}
	live, trailing := e.slotLSN(t, "walbox"), e.slotLSN(t, "walbox_replay")
	if trailing > afterA-1 || trailing == 0 {
		t.Fatalf("trailing slot at %s, want before batch A (ends at %s) with a 1h window", trailing, afterA)
	}
	unmoved := func(when string) {
		t.Helper()
		if got := e.slotLSN(t, "walbox"); got != live {
			t.Errorf("%s: the live slot moved from %s to %s", when, live, got)
		}
		if got := e.slotLSN(t, "walbox_replay"); got != trailing {
			t.Errorf("%s: the trailing slot moved from %s to %s", when, trailing, got)
		}
		waitUntil(ctx, t, 30*time.Second, "no temporary slot left ("+when+")", func() bool { return len(e.temporarySlots(t)) == 0 })
	}
	wantCounts := map[string]int{}
	for _, ev := range b {
		wantCounts[ev.AggregateType]++
	}

	for _, tc := range []struct {
		name     string
		from, to string
	}{
		{"lsn", afterA.String(), afterB.String()},
		{"time", timeA.UTC().Format(time.RFC3339Nano), timeB.UTC().Format(time.RFC3339Nano)},
	} {
		t.Run("exactly B by "+tc.name, func(t *testing.T) {
			prefix := "replay." + tc.name + "."
			res := runReplay(t, env, "--from", tc.from, "--to", tc.to, "--topic", prefix+"{aggregate_type}")
			if res.code != 0 {
				t.Fatalf("walbox replay exited %d:\n%s", res.code, res.stderr)
			}
			t.Logf("walbox replay --from %s --to %s:\nstdout:\n%sstderr (end):\n%s", tc.from, tc.to, res.stdout, tail(res.stderr, 400))
			for typ, n := range wantCounts {
				if !containsCount(res.stdout, prefix+typ, n) {
					t.Errorf("stdout does not report %d events for %s:\n%s", n, prefix+typ, res.stdout)
				}
			}
			cons, err := outboxtest.NewConsumer(broker.Addrs(), strings.ReplaceAll(prefix, ".", `\.`)+".*")
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
			// Anything more would arrive with what was read; a short poll
			// for extras (none expected) before comparing.
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			extra, _ := cons.Poll(pctx)
			pcancel()
			got = append(got, extra...)
			checkReplayed(t, b, append(a, c...), got, prefix)
			unmoved("after the replay by " + tc.name)
		})
	}

	t.Run("dry run counts only", func(t *testing.T) {
		res := runReplay(t, env, "--from", afterA.String(), "--to", afterB.String(), "--topic", "replay.dry.{aggregate_type}", "--dry-run")
		if res.code != 0 || !containsCount(res.stdout, "replay.dry.order", wantCounts["order"]) {
			t.Fatalf("dry run exited %d, stdout:\n%s\nstderr:\n%s", res.code, res.stdout, res.stderr)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		topics, err := kadm.NewClient(cl).ListTopics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range topics.Names() {
			if strings.HasPrefix(name, "replay.dry.") {
				t.Errorf("dry run created or wrote topic %s", name)
			}
		}
		unmoved("after the dry run")
	})

	t.Run("SIGKILL mid-stream leaves no slot", func(t *testing.T) {
		// An unreachable broker and one record in flight park the replay
		// in the middle of the stream, with its temporary slot open.
		kenv := append(append([]string(nil), env...), "WALBOX_KAFKA_BROKERS=127.0.0.1:1", "WALBOX_MAX_INFLIGHT_RECORDS=1")
		p := startReplay(t, kenv, "--from", afterA.String(), "--topic", "replay.killed.{aggregate_type}")
		waitUntil(ctx, t, time.Minute, "the temporary slot", func() bool { return len(e.temporarySlots(t)) == 1 })
		if !strings.Contains(p.stderr.String(), "replaying from a temporary copy") {
			waitUntil(ctx, t, 30*time.Second, "streaming", func() bool { return strings.Contains(p.stderr.String(), "replaying from a temporary copy") })
		}
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
		t.Logf("killed walbox replay; its stderr:\n%s", tail(p.stderr.String(), 600))
		unmoved("after SIGKILL of walbox replay")
	})

	t.Run("refusals", func(t *testing.T) {
		res := runReplay(t, env, "--from", "16/XYZ")
		t.Logf("malformed LSN: %s", res.stderr)
		if res.code != 2 || !strings.Contains(res.stderr, "expected the form 16/B374D848") {
			t.Errorf("malformed LSN: exit %d, stderr:\n%s", res.code, res.stderr)
		}
		res = runReplay(t, env, "--from", afterA.String(), "--replay-slot", "nosuch")
		t.Logf("no trailing slot: %s", tail(res.stderr, 500))
		if res.code != 1 || !strings.Contains(res.stderr, `slot "nosuch" does not exist`) || !strings.Contains(res.stderr, "--replay-window") {
			t.Errorf("no trailing slot: exit %d, stderr:\n%s", res.code, res.stderr)
		}
		res = runReplay(t, env)
		if res.code != 2 || !strings.Contains(res.stderr, "--from is required") {
			t.Errorf("no --from: exit %d, stderr:\n%s", res.code, res.stderr)
		}
		unmoved("after the refusals")
	})

	t.Run("range older than the window refused", func(t *testing.T) {
		// A 1s window: once walbox confirmed positions a second ago, the
		// trailing slot moves past A, B and C.
		run := startWalbox(t, append(env, "WALBOX_REPLAY_WINDOW=1s"))
		waitUntil(ctx, t, time.Minute, "walbox to stream", func() bool { return strings.Contains(run.stderr.String(), "msg=streaming") })
		d := e.batch(t, gen, 1, 1) // D
		waitUntil(ctx, t, time.Minute, "the trailing slot to pass C", func() bool { return e.slotLSN(t, "walbox_replay") >= afterC })
		if got, live := e.slotLSN(t, "walbox_replay"), e.slotLSN(t, "walbox"); got > live {
			t.Errorf("trailing slot %s is past the live slot %s", got, live)
		}
		if code := run.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Fatalf("walbox run exited %d", code)
		}
		earliest := e.slotLSN(t, "walbox_replay")
		e.batch(t, gen, 1, 1) // E: the first transaction the trailing slot holds, unless D is
		var dStarted time.Time
		if err := e.conn.QueryRow(ctx, `SELECT created_at FROM public.outbox WHERE id = $1`, d[0].ID).Scan(&dStarted); err != nil {
			t.Fatal(err)
		}
		afterE := e.now(t)
		firstRE := regexp.MustCompile(`the first of them committed at (\S+) \(`)
		for _, from := range []string{afterA.String(), timeA.UTC().Format(time.RFC3339Nano)} {
			res := runReplay(t, env, "--from", from, "--to", afterB.String(), "--topic", "replay.refused.{aggregate_type}")
			t.Logf("--from %s: %s", from, tail(res.stderr, 700))
			if res.code != 1 || !strings.Contains(res.stderr, "range not covered by the trailing slot") ||
				!strings.Contains(res.stderr, "give --from "+earliest.String()+" (or a later LSN)") {
				t.Errorf("--from %s older than the window: exit %d, stderr:\n%s", from, res.code, res.stderr)
			}
			// The earliest replayable time is D's or E's commit time.
			m := firstRE.FindStringSubmatch(res.stderr)
			if m == nil {
				t.Errorf("--from %s: the refusal names no earliest time:\n%s", from, res.stderr)
				continue
			}
			first, err := time.Parse(time.RFC3339Nano, m[1])
			if err != nil || first.Before(dStarted) || first.After(afterE) {
				t.Errorf("--from %s: earliest time %s (%v), want the commit time of D or E, between %s and %s", from, m[1], err, dStarted, afterE)
			}
		}
		waitUntil(ctx, t, 30*time.Second, "no temporary slot left", func() bool { return len(e.temporarySlots(t)) == 0 })
	})
}

// containsCount reports whether out has a line "topic <spaces> n".
func containsCount(out, topic string, n int) bool {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == topic && f[1] == fmt.Sprint(n) {
			return true
		}
	}
	return false
}

// checkReplayed: got holds exactly want (by event id, each once), each on
// its replay topic with the replay header and its usual key, in per-key
// order, and nothing of others.
func checkReplayed(t *testing.T, want, others []outboxtest.Event, got []outboxtest.Received, prefix string) {
	t.Helper()
	byID := map[string]outboxtest.Event{}
	for _, ev := range want {
		byID[ev.ID] = ev
	}
	other := map[string]bool{}
	for _, ev := range others {
		other[ev.ID] = true
	}
	seen := map[string]int{}
	lastSeq := map[string]int{}
	for _, r := range got {
		id := r.Headers["event_id"]
		if other[id] {
			t.Errorf("event %s of another batch was replayed", id)
			continue
		}
		ev, ok := byID[id]
		if !ok {
			t.Errorf("unexpected record %s on %s", id, r.Topic)
			continue
		}
		seen[id]++
		if r.Headers["walbox_replay"] != "true" {
			t.Errorf("event %s has no walbox_replay: true header: %v", id, r.Headers)
		}
		if r.Topic != prefix+ev.AggregateType || r.Key != ev.AggregateID {
			t.Errorf("event %s on %s with key %s, want %s and %s", id, r.Topic, r.Key, prefix+ev.AggregateType, ev.AggregateID)
		}
		if ev.Seq <= lastSeq[ev.AggregateID] {
			t.Errorf("aggregate %s: seq %d after %d", ev.AggregateID, ev.Seq, lastSeq[ev.AggregateID])
		}
		lastSeq[ev.AggregateID] = ev.Seq
	}
	for _, ev := range want {
		if seen[ev.ID] != 1 {
			t.Errorf("event %s of B arrived %d times, want once", ev.ID, seen[ev.ID])
		}
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// TestReplayWindowSurvivesSIGKILL: walbox run --replay-window is killed
// (SIGKILL) several times while a writer commits and the trailing slot is
// being advanced; sampled all along and after every kill, the trailing slot
// never passes the live slot and never moves backwards, and after each
// restart (empty history) it advances again.
func TestReplayWindowSurvivesSIGKILL(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, kfakeBrokers(t))
	conn, err := pgx.Connect(ctx, f.pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	e := &replayEnv{fixture: f, conn: conn}
	w := startWriter(ctx, t, f.pg.DSN("postgres"), 11, 20, 10, 1<<30, 5*time.Millisecond)
	defer w.halt()

	var last pglogrepl.LSN
	check := func(when string) pglogrepl.LSN {
		t.Helper()
		tr := e.slotLSN(t, "walbox_replay") // read first: the live slot only grows
		live := e.slotLSN(t, "walbox")
		if tr > live {
			t.Fatalf("%s: trailing slot %s is past the live slot %s", when, tr, live)
		}
		if tr < last {
			t.Fatalf("%s: trailing slot went backwards from %s to %s", when, last, tr)
		}
		last = tr
		return tr
	}
	for round := range 3 {
		p := startWalbox(t, append(f.env, "WALBOX_REPLAY_WINDOW=1s"))
		waitUntil(ctx, t, time.Minute, "the trailing slot", func() bool { return e.slotLSN(t, "walbox_replay") != 0 })
		before := check(fmt.Sprintf("round %d, started", round))
		waitUntil(ctx, t, time.Minute, fmt.Sprintf("round %d: the trailing slot to advance", round), func() bool {
			return check(fmt.Sprintf("round %d, running", round)) > before
		})
		// Kill it at some point of its advancing cycle (1s).
		time.Sleep(time.Duration(300*round) * time.Millisecond) // varies the moment of the kill, not synchronisation
		p.kill()
		check(fmt.Sprintf("round %d, after SIGKILL", round))
	}
	w.halt()
	if _, err := w.snapshot(); err != nil {
		t.Fatal(err)
	}
}
