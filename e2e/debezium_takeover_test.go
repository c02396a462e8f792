package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/internal/childproc"
	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// Issue 10, "Take over Debezium's position": real Debezium (Connect
// standalone, Postgres connector, outbox EventRouter, StringConverters)
// streams outbox events written continuously; it is stopped (gracefully,
// or with SIGKILL) mid-stream while the writer goes on; walbox
// migrate-from-debezium takes over the same slot in Debezium mode with the
// same configuration files. Then: every written event arrived, per
// aggregate in order, with Debezium's topic, key and value; the only
// duplicates are events Debezium delivered that committed after the start
// walbox chose from Debezium's stored offset (its unflushed window), each
// sent again exactly once; and nothing committed before that start was
// sent again. An independent pgoutput slot created before the first write
// gives each event's commit position.
func TestDebeziumTakeoverGracefulStop(t *testing.T) {
	fulltest.Require(t, "takeover of a running Debezium connector, runs Kafka Connect")
	runTakeover(t, false)
}

// The SIGKILL case also kills walbox itself right after it has taken
// over, and starts the takeover again: it must either plan the same start
// (nothing confirmed yet) or, once walbox has confirmed a position, start
// from the slot (the slot is then past Debezium's stored offset).
func TestDebeziumTakeoverKilled(t *testing.T) {
	fulltest.Require(t, "takeover of a killed Debezium connector, runs Kafka Connect")
	runTakeover(t, true)
}

func runTakeover(t *testing.T, kill bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	pg := pgtest.Start(t, pgtest.WorkMemServerDefault) // Debezium speaks protocol 1: 64kB would make it spill
	broker := kafkatest.Start(t)
	db := pgtest.NewDatabase(t, pg)
	conn, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{
		outboxtest.DDL,
		"CREATE PUBLICATION witness_pub FOR TABLE public.outbox",
		"SELECT pg_create_logical_replication_slot('witness', 'pgoutput')",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}

	c := debeziumtest.StartT(t, debeziumtest.Options{
		Bootstrap: broker.Addr(),
		PG:        debeziumtest.PG{Port: pg.Port(), DBName: db},
		Connector: map[string]string{
			"transforms.outbox.table.field.event.key": "aggregate_id",
			"transforms.outbox.route.by.field":        "aggregate_type",
		},
	})
	col := startCollectorPattern(ctx, t, broker.Addrs(), `outbox\.event\..*`)
	w := startWriter(ctx, t, pg.DSN(db), 10, 20, 5, 1<<30, 5*time.Millisecond)

	waitUntil(ctx, t, 3*time.Minute, "Debezium to deliver 300 events and store an offset", func() bool {
		_, err := os.Stat(c.OffsetsFile())
		return distinctIDs(col) >= 300 && err == nil
	})
	if kill {
		c.Kill()
	} else if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	// Debezium's records are those below the end offsets now: it produces
	// nothing more.
	ends := endOffsets(ctx, t, broker.Addrs())
	written, _ := w.snapshot()
	atStop := len(written)
	waitUntil(ctx, t, time.Minute, "200 more events written while nothing streams", func() bool {
		ws, _ := w.snapshot()
		return len(ws) >= atStop+200
	})

	env := []string{
		"WALBOX_DEBEZIUM_CONFIG=" + c.ConnectorPropertiesFile(),
		"WALBOX_DEBEZIUM_WORKER_CONFIG=" + c.WorkerPropertiesFile(),
		"WALBOX_METRICS_ADDR=", "WALBOX_LOG_FORMAT=text", "WALBOX_SLOT_BUSY_TIMEOUT=3m",
	}
	offsetsArg := []string{"--debezium-offsets", c.OffsetsFile()}
	out, err := runWalboxCmd(t, env, append([]string{"migrate-from-debezium", "--dry-run"}, offsetsArg...)...)
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`walbox starts at (\S+):`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dry run did not say where walbox starts:\n%s", out)
	}
	start, err := pglogrepl.ParseLSN(m[1])
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("takeover plan:\n%s", out)
	if !kill {
		// A distributed Connect cluster keeps the same entries in its
		// offsets topic: the plan read from there is the same.
		checkOffsetsTopicPlan(ctx, t, broker.Addrs(), env, c.OffsetsFile(), out)
	}
	// Debezium stopped inside a transaction: the inserts of it before the
	// offset's lsn, and the first of those at it, are streamed but not
	// sent again.
	skip := parseSkipped(t, out)

	p := startWalboxCmd(t, env, append([]string{"migrate-from-debezium"}, offsetsArg...)...)
	waitUntil(ctx, t, 2*time.Minute, "walbox to take over", func() bool {
		return strings.Contains(p.stderr.String(), "taking over Debezium's slot") || p.exited()
	})
	if p.exited() {
		t.Fatalf("walbox migrate-from-debezium exited: %v", p.err)
	}
	if kill {
		// Die right after the takeover, then take over again.
		p.kill()
		out, err := runWalboxCmd(t, env, append([]string{"migrate-from-debezium", "--dry-run"}, offsetsArg...)...)
		switch {
		case err == nil && strings.Contains(out, "walbox starts at "+start.String()+":"):
			t.Logf("after the kill, the takeover plans the same start %s", start)
			p = startWalboxCmd(t, env, append([]string{"migrate-from-debezium"}, offsetsArg...)...)
		case err == nil && strings.Contains(out, "or walbox already took over and streamed"):
			// walbox confirmed a position before it died: the slot is
			// past the stored offset and the takeover resumes from it.
			t.Logf("after the kill, walbox had confirmed a position; the takeover resumes from the slot:\n%s", out)
			p = startWalboxCmd(t, env, append([]string{"migrate-from-debezium"}, offsetsArg...)...)
		default:
			t.Fatalf("second takeover after a kill: %v\n%s", err, out)
		}
	}
	waitUntil(ctx, t, 2*time.Minute, "walbox to deliver what was written meanwhile", func() bool {
		return distinctIDs(col) >= atStop+200 || p.exited()
	})
	w.halt()
	written, werr := w.snapshot()
	if werr != nil {
		t.Fatal(werr)
	}
	waitUntil(ctx, t, 2*time.Minute, fmt.Sprintf("all %d written events", len(written)), func() bool {
		return distinctIDs(col) >= len(written) || p.exited()
	})
	if code := p.stop(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Fatalf("walbox exit code %d", code)
	}

	checkTakeover(t, written, col.snapshot(), ends, witnessCommits(ctx, t, conn), start, skip, kill)
}

// checkTakeover checks delivery, order and duplicates; debezium holds the
// end offsets when Debezium stopped (its records are below them).
//
// walboxKilled allows walbox's own duplicates: records the killed walbox
// produced without confirming them are sent again by the next one.
func checkTakeover(t *testing.T, written []outboxtest.Event, got []outboxtest.Received, debezium map[string]map[int32]int64,
	wal map[string]walPos, start pglogrepl.LSN, skip skipped, walboxKilled bool) {
	t.Helper()
	commitEnd := map[string]pglogrepl.LSN{}
	isSkipped := map[string]bool{}
	for id, w := range wal {
		commitEnd[id] = w.commitEnd
		isSkipped[id] = skip.covers(w)
	}
	byID := map[string]outboxtest.Event{}
	for _, e := range written {
		byID[e.ID] = e
	}
	sort.SliceStable(got, func(i, j int) bool {
		a, b := got[i], got[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	byDebezium, byWalbox := map[string]bool{}, map[string]int{}
	first := map[string]bool{}
	lastSeq := map[string]int{}
	var mismatches, orderViolations, dups, resentBeforeStart int
	for _, r := range got {
		id := r.Headers["id"] // the EventRouter's event id header
		fromDebezium := r.Offset < debezium[r.Topic][r.Partition]
		if fromDebezium {
			byDebezium[id] = true
		} else {
			byWalbox[id]++
			if (commitEnd[id] != 0 && commitEnd[id] <= start) || isSkipped[id] {
				resentBeforeStart++
				t.Errorf("event %s committed at %s (start %s, skipped %t) was sent again by walbox, though Debezium's stored offset covers it", id, commitEnd[id], start, isSkipped[id])
			}
		}
		if first[id] {
			dups++
			continue
		}
		first[id] = true
		e, ok := byID[id]
		if !ok {
			mismatches++
			t.Errorf("record %s/%d@%d with id %q matches no written event", r.Topic, r.Partition, r.Offset, id)
			continue
		}
		var payload struct {
			Seq int `json:"seq"`
		}
		_ = json.Unmarshal(r.Value, &payload)
		if r.Topic != e.Topic() || r.Key != e.AggregateID || payload.Seq != e.Seq {
			mismatches++
			t.Errorf("event %s: topic %s key %s seq %d, want %s %s %d", id, r.Topic, r.Key, payload.Seq, e.Topic(), e.AggregateID, e.Seq)
		}
		if e.Seq <= lastSeq[e.AggregateID] {
			orderViolations++
			t.Errorf("aggregate %s: seq %d delivered after seq %d", e.AggregateID, e.Seq, lastSeq[e.AggregateID])
		} else {
			lastSeq[e.AggregateID] = e.Seq
		}
	}
	lost := 0
	for _, e := range written {
		if !first[e.ID] {
			lost++
			if lost <= 10 {
				t.Errorf("event %s (aggregate %s seq %d) was never delivered", e.ID, e.AggregateID, e.Seq)
			}
		}
	}
	// Debezium's unflushed window: events it delivered that commit after
	// the start walbox took from its stored offset. walbox sends each of
	// them once more, and nothing else twice.
	window, resent, nSkipped := 0, 0, 0
	for id := range byDebezium {
		if isSkipped[id] {
			nSkipped++
			continue
		}
		if commitEnd[id] > start {
			window++
			if byWalbox[id] == 0 || (byWalbox[id] > 1 && !walboxKilled) {
				t.Errorf("event %s of Debezium's unflushed window was sent %d times by walbox, want once", id, byWalbox[id])
			}
		}
		if byWalbox[id] > 0 {
			resent++
		}
	}
	walboxDups := 0
	for id, n := range byWalbox {
		if n > 1 {
			walboxDups += n - 1
			if !walboxKilled {
				t.Errorf("walbox sent event %s %d times", id, n)
			}
		}
	}
	t.Logf("written %d, delivered %d distinct (%d records): Debezium %d, walbox %d; duplicates %d: Debezium's unflushed window %d (start %s) + walbox's own after its kill %d; "+
		"streamed but not sent again (Debezium's part of its last transaction) %d; lost %d, order violations %d, mismatches %d",
		len(written), len(first), len(got), len(byDebezium), len(byWalbox), dups, window, start, walboxDups, nSkipped, lost, orderViolations, mismatches)
	if lost > 0 || orderViolations > 0 || mismatches > 0 || resentBeforeStart > 0 {
		t.Fatalf("takeover failed: lost %d, order violations %d, mismatches %d, resent before the start %d", lost, orderViolations, mismatches, resentBeforeStart)
	}
	if resent != window || dups != window+walboxDups {
		t.Errorf("duplicates %d (events re-sent %d), want exactly Debezium's unflushed window %d", dups, resent, window)
	}
}

// endOffsets returns the end offset of every partition of the outbox topics.
func endOffsets(ctx context.Context, t *testing.T, brokers []string) map[string]map[int32]int64 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	topics, err := adm.ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range topics.Names() {
		if strings.HasPrefix(n, "outbox.event.") {
			names = append(names, n)
		}
	}
	ends, err := adm.ListEndOffsets(ctx, names...)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if out[o.Topic] == nil {
			out[o.Topic] = map[int32]int64{}
		}
		out[o.Topic][o.Partition] = o.Offset
	})
	return out
}

// skipped names the events of Debezium's last transaction that the plan
// says are streamed but not sent again: its inserts before upTo and the
// first atUpTo of those at upTo.
type skipped struct {
	xid    uint32
	upTo   pglogrepl.LSN
	atUpTo int
}

var skippedLine = regexp.MustCompile(`events of transaction (\d+) that Debezium had sent, streamed but not sent again: \d+ \(its inserts before (\S+) and the first (\d+) at it\)`)

// parseSkipped reads the skipped events from a dry run's plan.
func parseSkipped(t *testing.T, plan string) skipped {
	t.Helper()
	var s skipped
	m := skippedLine.FindStringSubmatch(plan)
	if m == nil {
		if strings.Contains(plan, "streamed but not sent again") {
			t.Fatalf("the plan's skipped events are not in the expected form:\n%s", plan)
		}
		return s
	}
	fmt.Sscanf(m[1], "%d", &s.xid)
	fmt.Sscanf(m[3], "%d", &s.atUpTo)
	var err error
	if s.upTo, err = pglogrepl.ParseLSN(m[2]); err != nil {
		t.Fatal(err)
	}
	return s
}

func (s skipped) covers(w walPos) bool {
	return s.xid != 0 && w.xid == s.xid && (w.lsn < s.upTo || w.lsn == s.upTo && w.ordAtLSN < s.atUpTo)
}

// walPos is where an event is in the WAL.
type walPos struct {
	xid       uint32
	lsn       pglogrepl.LSN // the insert
	ordAtLSN  int           // how many inserts of its transaction precede it at lsn (the rows of a COPY share one)
	commitEnd pglogrepl.LSN // the end of its transaction's commit record
}

// witnessCommits maps each event id to its WAL position, from the witness
// slot.
func witnessCommits(ctx context.Context, t *testing.T, conn *pgx.Conn) map[string]walPos {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes('witness', NULL, NULL, 'proto_version', '1', 'publication_names', 'witness_pub')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]walPos{}
	var (
		pending []string
		xid     uint32
	)
	for rows.Next() {
		var (
			l    string
			data []byte
		)
		if err := rows.Scan(&l, &data); err != nil {
			t.Fatal(err)
		}
		lsn, _ := pglogrepl.ParseLSN(l)
		msg, err := pglogrepl.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pglogrepl.BeginMessage:
			pending, xid = pending[:0], m.Xid
		case *pglogrepl.InsertMessage:
			id := string(m.Tuple.Columns[0].Data) // id is the first column
			ord := 0
			if len(pending) > 0 && out[pending[len(pending)-1]].lsn == lsn {
				ord = out[pending[len(pending)-1]].ordAtLSN + 1
			}
			pending = append(pending, id)
			out[id] = walPos{xid: xid, lsn: lsn, ordAtLSN: ord}
		case *pglogrepl.CommitMessage:
			for _, id := range pending {
				p := out[id]
				p.commitEnd = m.TransactionEndLSN
				out[id] = p
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// runWalboxCmd runs the walbox binary with args to its end and returns its
// combined output.
func runWalboxCmd(t *testing.T, env []string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(walboxBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := childproc.CombinedOutput(cmd)
	return string(out), err
}

// distinctIDs counts the distinct event ids (the EventRouter's "id"
// header) the collector has seen.
func distinctIDs(col *collector) int {
	seen := map[string]bool{}
	for _, r := range col.snapshot() {
		seen[r.Headers["id"]] = true
	}
	return len(seen)
}

// checkOffsetsTopicPlan writes the entries of the standalone offsets file
// to an offsets topic, as a distributed Connect cluster stores them, and
// checks that migrate-from-debezium --debezium-offsets-topic plans the same
// start as from the file.
func checkOffsetsTopicPlan(ctx context.Context, t *testing.T, brokers, env []string, offsetsFile, filePlan string) {
	t.Helper()
	entries, err := debezium.ReadOffsetsFile(offsetsFile)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("connect-offsets"), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, e := range entries {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: e[0], Value: e[1]}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	out, err := runWalboxCmd(t, env, "migrate-from-debezium", "--dry-run", "--debezium-offsets-topic", "connect-offsets")
	if err != nil {
		t.Fatalf("dry run from the offsets topic: %v\n%s", err, out)
	}
	line := func(s string) string {
		i := strings.Index(s, "walbox starts at ")
		if i < 0 {
			return ""
		}
		return strings.SplitN(s[i:], "\n", 2)[0]
	}
	if got, want := line(out), line(filePlan); got == "" || got != want {
		t.Errorf("plan from the offsets topic %q, from the file %q", got, want)
	}
}
