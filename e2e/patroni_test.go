package e2e

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/patronitest"
)

// TestPatroni runs the built walbox against a real Patroni cluster (two
// members, etcd, PostgreSQL 15 and 17) as docs/patroni.md sets it up: the
// slot a Patroni permanent slot, the publication created by hand, walbox
// on a multi-host DSN with target_session_attrs=read-write, a writer at
// about 1,000 events/s. A planned switchover, then a SIGKILL of the
// leader's Patroni and postmaster, lose nothing the new primary holds;
// after the killed member rejoined, its replica is cut off for about
// 3,000 events before the leader is killed again: nothing the new primary
// holds is lost and the events it lacks are reported as erased, exactly.
// After each crash a probe writes one event as soon as the new primary
// accepts writes, and the time until walbox delivered it is logged (the
// issue measured up to 15.4 s with the doubling backoff).
func TestPatroni(t *testing.T) {
	fulltest.Require(t, "walbox on a real Patroni cluster: switchover, crash, lossy crash")
	for _, v := range patronitest.RequireVersions(t, 15, 17) {
		// A broker each: the collector counts what it consumes. The two
		// run side by side: most of each is waiting for Patroni's ttl.
		t.Run(v.String(), func(t *testing.T) {
			t.Parallel()
			testPatroni(t, v, kafkatest.Start(t).Addrs())
		})
	}
}

func testPatroni(t *testing.T, v patronitest.Version, brokers []string) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c := patronitest.Start(t, patronitest.Options{Version: v,
		Slots: map[string]patronitest.Slot{"walbox": {Type: "logical", Database: "postgres", Plugin: "pgoutput"}}})
	leader, err := c.WaitLeader(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Patroni created the slot at bootstrap; the table and the publication
	// come after it, as docs/patroni.md says.
	conn, err := pgx.Connect(ctx, leader.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{outboxtest.DDL, `CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	conn.Close(ctx)
	for _, m := range c.Members {
		waitPatroniSlot(ctx, t, m)
	}

	dsn := c.MultiHostDSN("postgres")
	const probeTopic = "outbox.event.probe"
	env := []string{
		"WALBOX_PG_DSN=" + dsn,
		"WALBOX_KAFKA_BROKERS=" + strings.Join(brokers, ","),
		"WALBOX_STATUS_INTERVAL=200ms",
		"WALBOX_LOG_LEVEL=info",
		"WALBOX_LOG_FORMAT=text",
		"WALBOX_METRICS_ADDR=127.0.0.1:0",
	}
	if v.Major >= 17 {
		// Under Patroni --failover-slot is not needed; set, it must not
		// refuse Patroni's slot (it advised ALTER ... (FAILOVER true),
		// which takes the slot out of Patroni's hands).
		env = append(env, "WALBOX_FAILOVER_SLOT=true")
	}
	// A slot walbox would create is refused: Patroni drops every slot
	// outside its slots: (measured: within a second on the primary).
	otherEnv := append(append([]string(nil), env...), "WALBOX_SLOT=walbox_other", "WALBOX_FAILOVER_SLOT=false", "WALBOX_CREATE_SLOT=true")
	refused := runWalboxToExit(t, otherEnv, nil, time.Minute)
	if refused.code == 0 || !strings.Contains(refused.stderr, "run by Patroni") || !strings.Contains(refused.stderr, "slots: {walbox_other: {type: logical") {
		t.Fatalf("walbox --create-slot --slot walbox_other on a Patroni cluster exited %d, want a refusal naming Patroni's slots::\n%s", refused.code, refused.stderr)
	}
	checkOut := &logbuf.Buffer{}
	check := startWalboxOut(t, otherEnv, checkOut, "config", "check", "--connect")
	select {
	case <-check.done:
	case <-time.After(time.Minute):
		t.Fatal("walbox config check --connect did not finish within a minute")
	}
	if s := checkOut.String() + check.stderr.String(); check.cmd.ProcessState.ExitCode() == 0 || !strings.Contains(s, "run by Patroni") {
		t.Fatalf("walbox config check --connect --create-slot --slot walbox_other on a Patroni cluster does not say the slot would be refused:\n%s", s)
	}
	col := startCollector(ctx, t, brokers)
	w := startWriter(ctx, t, dsn, uint64(v.Major), 200, 30, 10_000_000, 10*time.Millisecond)
	p := startWalbox(t, env)
	progress := func(what string, n int) {
		t.Helper()
		target := col.distinct() + n
		waitUntil(ctx, t, 3*time.Minute, what, func() bool {
			if p.exited() {
				t.Fatalf("walbox exited: %v", p.err)
			}
			return col.distinct() >= target
		})
	}
	progress("walbox to deliver the first events", 2000)
	if v.Major >= 17 && !strings.Contains(p.stderr.String(), "the server is run by Patroni") {
		t.Errorf("walbox with --failover-slot on Patroni's slot did not say that Patroni keeps the slot:\n%s", p.stderr.Tail(3000))
	}
	rate := func() string {
		written, _ := w.snapshot()
		return fmt.Sprintf("%.0f events/s", float64(len(written))/time.Since(began).Seconds())
	}

	// 1. A planned switchover.
	other := c.Members[0]
	if other == leader {
		other = c.Members[1]
	}
	waitReplicaSlots(ctx, t, c, leader)
	if err := c.Switchover(ctx, leader, other); err != nil {
		t.Fatal(err)
	}
	progress("delivery after the switchover", 2000)
	t.Logf("switchover %s -> %s done; writer at %s", leader.Name, other.Name, rate())

	// 2. The leader's Patroni and postmaster SIGKILLed.
	waitReplicaSlots(ctx, t, c, other)
	erasedBefore := strings.Count(p.stderr.String(), "erased_events=")
	if err := other.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	crashed := time.Now()
	resume, promoted := probeResume(ctx, t, c, col, uint64(v.Major)*10+1)
	t.Logf("crash of leader %s: the new primary accepted writes %s after the crash; its first event was delivered %s after that", other.Name, promoted.Sub(crashed).Round(time.Millisecond), resume.Round(time.Millisecond))
	progress("delivery after the crash", 2000)
	if n := strings.Count(p.stderr.String(), "erased_events=") - erasedBefore; n > 0 {
		t.Logf("the crash erased events walbox had sent (the replica lagged): %s", lastLine(p.stderr.String(), "erased_events="))
	}

	// 3. The killed member rejoins; then its leader is cut off from it for
	// about 3,000 events and killed: the lossy failover.
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	waitPatroniSlot(ctx, t, other)
	current, err := c.WaitLeader(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	progress("delivery with the member rejoined", 1000)
	waitReplicaSlots(ctx, t, c, current)
	current.Proxy.Drop() // its replicas reach it through its proxy only
	cut, _ := w.snapshot()
	waitUntil(ctx, t, 2*time.Minute, "3,000 events written after the cut", func() bool {
		written, _ := w.snapshot()
		return len(written) >= len(cut)+3000
	})
	atCrash, _ := w.snapshot()
	waitUntil(ctx, t, 2*time.Minute, "walbox to deliver what was written before the crash", func() bool {
		return col.distinct() >= len(atCrash)
	})
	erasedBefore = strings.Count(p.stderr.String(), "erased_events=")
	if err := current.Kill(ctx); err != nil {
		t.Fatal(err)
	}
	crashed = time.Now()
	resume, promoted = probeResume(ctx, t, c, col, uint64(v.Major)*10+2)
	t.Logf("lossy crash of leader %s: the cut-off %s accepted writes %s after the crash; its first event was delivered %s after that", current.Name, other.Name, promoted.Sub(crashed).Round(time.Millisecond), resume.Round(time.Millisecond))
	progress("delivery after the lossy crash", 2000)
	w.halt()
	written, werr := w.snapshot()
	if werr != nil {
		t.Fatalf("writer: %v", werr)
	}

	// Every row the surviving primary holds, once at least, in order.
	held := heldIDs(ctx, t, other.DSN("postgres"))
	var want []outboxtest.Event
	for _, e := range written {
		if held[e.ID] {
			want = append(want, e)
		}
	}
	keep := func(got []outboxtest.Received) []outboxtest.Received {
		var out []outboxtest.Received
		for _, r := range got {
			if held[r.Headers["event_id"]] && r.Topic != probeTopic {
				out = append(out, r)
			}
		}
		return out
	}
	waitUntil(ctx, t, 3*time.Minute, "every row of the surviving primary in Kafka", func() bool {
		return outboxtest.DistinctIDs(keep(col.snapshot())) >= len(want)
	})
	got := col.snapshot()
	rep := outboxtest.Check(want, keep(got))
	delivered := map[string]bool{}
	for _, r := range got {
		delivered[r.Headers["event_id"]] = true
	}
	gone := 0 // committed, delivered, and not on the surviving primary
	for _, e := range written {
		if delivered[e.ID] && !held[e.ID] {
			gone++
		}
	}
	erasedLine := ""
	if strings.Count(p.stderr.String(), "erased_events=") > erasedBefore {
		erasedLine = lastLine(p.stderr.String(), "erased_events=")
	}
	t.Logf("%s: written %d (writer at %s), on the surviving primary %d, delivered and not on it %d; %v; walbox said: %s; the test took %s",
		v, len(written), rate(), len(want), gone, rep, erasedLine, time.Since(began).Round(time.Second))
	if !rep.OK() {
		t.Fatalf("after a switchover and two crashes under Patroni: %v", rep)
	}
	if gone == 0 {
		t.Fatal("the replica cut off before the crash lacked no event walbox had delivered: the lossy failover was not lossy")
	}
	m := regexp.MustCompile(`erased_events=(\d+) erased_events_exact=(\w+)`).FindStringSubmatch(erasedLine)
	if m == nil {
		t.Fatalf("walbox did not report the %d delivered events the new primary lacks as erased", gone)
	}
	if n, _ := strconv.Atoi(m[1]); m[2] == "true" && n != gone {
		t.Fatalf("walbox reported %d erased events (exact), but %d delivered events are not on the new primary", n, gone)
	}
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox exited %d on SIGTERM", code)
	}
}

// probeResume writes one event through the multi-host DSN as soon as a
// primary accepts it (retrying every 50 ms), and returns how long walbox
// took to deliver it, and when it was committed.
func probeResume(ctx context.Context, t *testing.T, c *patronitest.Cluster, col *collector, seed uint64) (time.Duration, time.Time) {
	t.Helper()
	ev := outboxtest.NewGenerator(1000+seed, 1, "probe").Next()
	var committed time.Time
	waitUntil(ctx, t, 3*time.Minute, "a primary to accept the probe event", func() bool {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, c.MultiHostDSN("postgres"))
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		if err := outboxtest.WriteTx(cctx, conn, []outboxtest.Event{ev}); err != nil {
			return false
		}
		committed = time.Now()
		return true
	})
	var at time.Time
	waitUntil(ctx, t, 3*time.Minute, "walbox to deliver the probe event", func() bool {
		for _, r := range col.snapshot() {
			if r.Headers["event_id"] == ev.ID {
				at = r.At
				return true
			}
		}
		return false
	})
	return at.Sub(committed), committed
}

func waitPatroniSlot(ctx context.Context, t *testing.T, m *patronitest.Member) {
	t.Helper()
	waitUntil(ctx, t, 3*time.Minute, "the permanent slot on "+m.Name, func() bool {
		conn, err := pgx.Connect(ctx, m.DSN("postgres"))
		if err != nil {
			return false
		}
		defer conn.Close(context.Background())
		var n int
		err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walbox' AND slot_type = 'logical'`).Scan(&n)
		return err == nil && n == 1
	})
}

// waitReplicaSlots waits until every replica's copy of the slot can be
// decoded there: Patroni copies the slot with the leader's restart_lsn,
// which for a replica made by a base backup after the slot lies before
// the oldest WAL the replica has, and moves the copy only as the slot
// moves on the leader (walbox confirms, the server logs its running
// transactions). A failover before that leaves walbox a slot it cannot
// read: it stops with "requested WAL segment ... has already been
// removed" (docs/patroni.md). This waits for a copy that starts within
// the replica's WAL and is at least where the leader's slot was.
func waitReplicaSlots(ctx context.Context, t *testing.T, c *patronitest.Cluster, leader *patronitest.Member) {
	t.Helper()
	conn, err := pgx.Connect(ctx, leader.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var target string
	err = conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&target)
	if err != nil {
		t.Fatalf("the slot's position on the leader %s: %v", leader.Name, err)
	}
	// A checkpoint logs the running transactions, where a slot's
	// restart_lsn can move (the server does so by itself every 15 s).
	var checkpointed time.Time
	checkpoint := func() {
		if time.Since(checkpointed) > 2*time.Second {
			_, _ = conn.Exec(ctx, "CHECKPOINT")
			checkpointed = time.Now()
		}
	}
	for _, m := range c.Members {
		if m == leader {
			continue
		}
		var last string
		waitUntil(ctx, t, 3*time.Minute, "Patroni to move "+m.Name+"'s copy of the slot into its WAL and to "+target, func() bool {
			checkpoint()
			conn, err := pgx.Connect(ctx, m.DSN("postgres"))
			if err != nil {
				return false
			}
			defer conn.Close(context.Background())
			var restart, oldest string
			var segment int64
			var caught bool
			err = conn.QueryRow(ctx, `SELECT s.restart_lsn::text, s.confirmed_flush_lsn >= $1::pg_lsn,
				(SELECT min(name) FROM pg_ls_waldir() WHERE name ~ '^[0-9A-F]{24}$'),
				(SELECT setting::bigint FROM pg_settings WHERE name = 'wal_segment_size')
				FROM pg_replication_slots s WHERE s.slot_name = 'walbox'`, target).Scan(&restart, &caught, &oldest, &segment)
			if err != nil || !caught {
				return false
			}
			hi, err1 := strconv.ParseUint(oldest[8:16], 16, 32)
			lo, err2 := strconv.ParseUint(oldest[16:24], 16, 32)
			if err1 != nil || err2 != nil {
				return false
			}
			first := hi<<32 | lo*uint64(segment)
			var rh, rl uint64
			if _, err := fmt.Sscanf(restart, "%X/%X", &rh, &rl); err != nil {
				return false
			}
			last = fmt.Sprintf("restart_lsn %s, oldest WAL %s", restart, oldest)
			return rh<<32|rl >= first
		})
		t.Logf("%s's copy of the slot: %s", m.Name, last)
	}
}

func heldIDs(ctx context.Context, t *testing.T, dsn string) map[string]bool {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, `SELECT id::text FROM public.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	held := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		held[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return held
}

// lastLine is the last line of s that contains sub.
func lastLine(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) {
			return lines[i]
		}
	}
	return ""
}
