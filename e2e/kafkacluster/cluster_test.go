package kafkacluster

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

// freeze is how long two of the three brokers stay frozen (SIGSTOP).
const freeze = 20 * time.Second

// crashBound is the worst commit-to-consumer latency allowed through a
// rolling restart, a single broker crash or a controller failover, in
// either delivery mode (issue 29: "no event may reach a consumer more than
// ~30 s after its commit").
const crashBound = 30 * time.Second

// crashSlack is how long after Kafka recovered from a crash by itself (the
// controller fenced the dead node) walbox may take to deliver what the
// crash held: the bound when Kafka alone took longer than crashBound less
// this, as on a loaded machine. walbox took 0.9 to 1.7 s after Kafka in
// the runs measured; the slack is far below the minute-long receive
// timeout that issue 29's stall waited for.
const crashSlack = 15 * time.Second

// TestClusterFaultsAtLeastOnce: at-least-once delivery, topics created by
// the brokers on first produce (auto.create.topics.enable=true).
func TestClusterFaultsAtLeastOnce(t *testing.T) { runClusterFaults(t, false) }

// TestClusterFaultsExactlyOnce: exactly-once delivery, automatic topic
// creation off and the topics made by the operator beforehand.
func TestClusterFaultsExactlyOnce(t *testing.T) { runClusterFaults(t, true) }

// phase is one fault and the recovery after it. Its events are those
// committed after the previous phase's last delivered event (from) up to
// its own last one (to): each was committed before the next fault began
// and reached the consumer before it did, so a latency is charged to the
// one fault it went through.
type phase struct {
	name       string
	start, end time.Time     // the fault began, the phase ended
	from, to   time.Time     // the commit times it is charged for: (from, to]
	worst      time.Duration // worst commit-to-consumer latency of events committed in the window
	events     int
	// the event with the worst latency: its partition, and its commit to
	// the broker's append and append to the consumer's fetch
	worstAt          string
	toAppend, toPoll time.Duration
	worstAppend      time.Duration // worst commit-to-append of the window
}

// runClusterFaults runs one walbox process through every fault in turn,
// under a writer of about 1,000 events/s, and checks delivery at the end.
func runClusterFaults(t *testing.T, eos bool) {
	fulltest.Require(t, "a three-broker Kafka cluster restarted, crashed, frozen and failed over under load")
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	mode, prefix := "at-least-once", "cluster.alo."
	// The brokers stamp each record with its append time, so a slow
	// delivery splits into walbox's part (commit to append: reading,
	// producing, Kafka's acknowledgement) and the consumer's (append to
	// fetch).
	kopts := []func(*kafkatest.Options){kafkatest.WithProperty("log.message.timestamp.type", "LogAppendTime")}
	if eos {
		mode, prefix = "exactly-once", "cluster.eos."
		kopts = append(kopts, kafkatest.WithAutoCreateTopics(false))
	}
	c := kafkatest.StartCluster(t, kopts...)
	pg := pgtest.Start(t)
	dsn := pg.DSN("postgres")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	if _, _, err := slotctl.Ensure(ctx, conn, slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}); err != nil {
		t.Fatal(err)
	}
	if eos {
		createTopics(ctx, t, c, prefix+"order", prefix+"customer")
	}
	metrics := freeAddr(t)
	env := []string{
		"WALBOX_PG_DSN=" + dsn,
		"WALBOX_KAFKA_BROKERS=" + strings.Join(c.Addrs(), ","),
		"WALBOX_TOPIC=" + prefix + "{aggregate_type}",
		"WALBOX_METRICS_ADDR=" + metrics,
		// WALBOX_TEST_LOG_LEVEL=debug for a run investigated by hand
		// (with WALBOX_TEST_LOG_DIR); franz-go's per-attempt lines are
		// then expected.
		"WALBOX_LOG_LEVEL=" + cmp.Or(os.Getenv("WALBOX_TEST_LOG_LEVEL"), "info"),
	}
	if eos {
		env = append(env, "WALBOX_DELIVERY=exactly-once", "WALBOX_STATE_TOPIC=walbox-state.cluster")
	}
	// About 1,000 events/s: 1 to 40 rows every 20 ms.
	w := startWriter(ctx, t, dsn, 40, 20*time.Millisecond)
	col := startCollector(ctx, t, c.Addrs(), regexp.QuoteMeta(prefix)+".*")
	p := startWalbox(t, env)

	flowing := func(n int) {
		t.Helper()
		target := col.distinct() + n
		deadline := time.Now().Add(2 * time.Minute)
		for col.distinct() < target {
			if p.exited() {
				t.Fatalf("walbox exited: %v", p.err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %d more events to flow (%d consumed)", n, col.distinct())
			}
			time.Sleep(50 * time.Millisecond) // polling interval
		}
	}
	inSync := func() {
		t.Helper()
		if err := c.WaitInSync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// drained waits until every event committed so far has reached the
	// consumer, and returns the commit time of the last of them. A phase
	// ends only then, so the next fault does not begin while events of
	// this one are still on their way: an event the crash held for 11 s
	// would otherwise wait out the next phase's 20 s freeze too, and the
	// crash would be charged 31 s (as a CI run measured before phases
	// waited for this). Events committed after that last one (while it
	// was awaited) belong to the next phase: the next fault may hold them.
	drained := func() time.Time {
		t.Helper()
		written, err := w.snapshot()
		if err != nil {
			t.Fatalf("writer: %v", err)
		}
		last := time.Now()
		if len(written) > 0 {
			last, _ = w.commitTime(written[len(written)-1].ID)
		}
		deadline := time.Now().Add(2 * time.Minute)
		for i := 0; i < len(written); {
			if col.has(written[i].ID) {
				i++
				continue
			}
			if p.exited() {
				t.Fatalf("walbox exited: %v", p.err)
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for the %d events committed so far to reach the consumer (the first missing: %s)", len(written), written[i].ID)
			}
			time.Sleep(50 * time.Millisecond) // polling interval
		}
		return last
	}
	var phases []*phase
	// kafkaOwn is, by phase index, how long Kafka took to recover from a
	// crash without walbox's part (crash).
	kafkaOwn := map[int]time.Duration{}
	var barrier time.Time // the commit time of the last event delivered before the next fault
	run := func(name string, fault func()) {
		t.Helper()
		ph := &phase{name: name, start: time.Now(), from: barrier}
		t.Logf("%s: begins at %s", name, ph.start.Format("15:04:05.000"))
		fault()
		flowing(300)
		inSync()
		barrier = drained()
		ph.end, ph.to = time.Now(), barrier
		phases = append(phases, ph)
		t.Logf("%s: %s", name, ph.end.Sub(ph.start).Round(10*time.Millisecond))
	}
	flowing(300)
	inSync()
	barrier = drained()
	// Auto-created or made by the operator, walbox's topics (and its
	// exactly-once state topic) have 3 replicas and min.insync.replicas=2.
	checked := []string{prefix + "order", prefix + "customer"}
	if eos {
		checked = append(checked, "walbox-state.cluster")
	}
	checkReplication(ctx, t, c, checked...)

	run("rolling restart (SIGTERM, restart, wait in sync; each broker)", func() {
		for id := 1; id <= c.Nodes(); id++ {
			b := c.Node(id)
			if err := b.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			if err := b.Restart(ctx); err != nil {
				t.Fatal(err)
			}
			inSync()
			flowing(100)
		}
	})
	run("SIGKILL of the partition leader", func() {
		leader, err := c.Leader(ctx, prefix+"order", 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("before the crash: %s", layout(ctx, c, eos, checked...))
		kafkaOwn[len(phases)] = crash(ctx, t, c, leader, checked...)
	})
	if eos {
		run("SIGKILL of the transaction coordinator", func() {
			coord, err := c.TxnCoordinator(ctx, "walbox-walbox")
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("before the crash: %s", layout(ctx, c, eos, checked...))
			kafkaOwn[len(phases)] = crash(ctx, t, c, coord, checked...)
		})
	}
	var readyz []string
	run(fmt.Sprintf("two of three brokers frozen for %s", freeze), func() {
		ctrl, err := c.ActiveController(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var frozen []*kafkatest.Broker
		for id := 1; id <= c.Nodes() && len(frozen) < 2; id++ {
			if id != ctrl {
				frozen = append(frozen, c.Node(id))
			}
		}
		for _, b := range frozen {
			if err := b.Pause(); err != nil {
				t.Fatal(err)
			}
		}
		end := time.Now().Add(freeze)
		for time.Now().Before(end) {
			code, body := get(ctx, metrics, "/readyz")
			readyz = append(readyz, fmt.Sprintf("%d %s", code, body))
			time.Sleep(time.Second) // one sample a second, the freeze's pace
		}
		for _, b := range frozen {
			if err := b.Resume(); err != nil {
				t.Fatal(err)
			}
		}
	})
	run("controller failover (SIGTERM of the active controller)", func() {
		ctrl, err := c.ActiveController(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Node(ctrl).Stop(ctx); err != nil {
			t.Fatal(err)
		}
		next, err := c.ActiveController(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for next == ctrl && ctx.Err() == nil {
			time.Sleep(100 * time.Millisecond) // polling the quorum
			next, err = c.ActiveController(ctx)
			if err != nil {
				t.Fatal(err)
			}
		}
		t.Logf("active controller %d -> %d", ctrl, next)
		if err := c.Node(ctrl).Restart(ctx); err != nil {
			t.Fatal(err)
		}
	})

	w.halt()
	written, err := w.snapshot()
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for col.distinct() < len(written) {
		if time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // polling interval
	}
	got := col.snapshot()
	rep := outboxtest.CheckPrefix(written, got, prefix)
	t.Logf("%s: %v", mode, rep)
	if !rep.OK() || rep.Delivered != len(written) {
		t.Errorf("%s: delivery check failed: %v", mode, rep)
	}
	if eos && rep.Duplicates != 0 {
		t.Errorf("%s: %d duplicates, want 0", mode, rep.Duplicates)
	}
	if p.exited() {
		t.Errorf("walbox exited during the faults: %v", p.err)
	}

	// Commit-to-consumer latency of each event's first delivery, by the
	// phase its commit fell in.
	first := map[string]outboxtest.Received{}
	for _, r := range got {
		id := r.Headers["event_id"]
		if f, ok := first[id]; !ok || r.At.Before(f.At) {
			first[id] = r
		}
	}
	var steady time.Duration
	for id, r := range first {
		committed, ok := w.commitTime(id)
		if !ok {
			continue
		}
		lat := r.At.Sub(committed)
		in := false
		for _, ph := range phases {
			if committed.After(ph.from) && !committed.After(ph.to) {
				ph.events, in = ph.events+1, true
				ph.worstAppend = max(ph.worstAppend, r.Timestamp.Sub(committed))
				if lat > ph.worst {
					ph.worst = lat
					ph.worstAt = fmt.Sprintf("%s[%d] committed at %+.2fs", r.Topic, r.Partition, committed.Sub(ph.start).Seconds())
					ph.toAppend, ph.toPoll = r.Timestamp.Sub(committed), r.At.Sub(r.Timestamp)
				}
			}
		}
		if !in {
			steady = max(steady, lat)
		}
	}
	for i, ph := range phases {
		t.Logf("%s: %s: %d events committed, worst commit-to-consumer latency %s (%s: %s to the broker's append, %s more to the consumer); worst commit-to-append %s",
			mode, ph.name, ph.events, ph.worst.Round(10*time.Millisecond), ph.worstAt, ph.toAppend.Round(10*time.Millisecond), ph.toPoll.Round(10*time.Millisecond), ph.worstAppend.Round(10*time.Millisecond))
		bound := crashBound
		// A loaded machine can slow Kafka's own failover (a node's
		// JVM, the controller's election and fencing) past the bound;
		// walbox is then held to crashSlack after Kafka recovered.
		if own, ok := kafkaOwn[i]; ok && own+crashSlack > bound {
			t.Logf("%s: %s: Kafka took %s to recover by itself; bound %s", mode, ph.name, own.Round(10*time.Millisecond), (own + crashSlack).Round(10*time.Millisecond))
			bound = own + crashSlack
		}
		if strings.Contains(ph.name, "frozen") {
			bound += freeze
		}
		if ph.worst > bound {
			t.Errorf("%s: %s: worst commit-to-consumer latency %s, want at most %s", mode, ph.name, ph.worst.Round(10*time.Millisecond), bound)
		}
	}
	t.Logf("%s: outside the faults, worst latency %s", mode, steady.Round(10*time.Millisecond))

	streaming := 0
	for _, s := range readyz {
		if strings.HasPrefix(s, "200 streaming") {
			streaming++
		}
	}
	t.Logf("%s: /readyz during the freeze: %d of %d one-second samples said 200 streaming; samples: %q", mode, streaming, len(readyz), readyz)
	if notAcked := slices0(readyz, func(s string) bool { return strings.HasPrefix(s, "503") && strings.Contains(s, "acknowledged") }); notAcked == 0 {
		t.Errorf("%s: /readyz never said that nothing is being acknowledged while two brokers were frozen", mode)
	}
	_, metricsText := get(ctx, metrics, "/metrics")
	outages := metricValue(metricsText, "walbox_kafka_broker_outages_total")
	logs := p.stderr.String()
	unreachable, back := strings.Count(logs, "kafka broker unreachable"), strings.Count(logs, "kafka broker reachable again")
	// Every broker stopped once in the rolling restart, and once or twice
	// more: one line per outage, per identity walbox dials it by (its
	// node id, and a seed address at most once more).
	if unreachable == 0 || back == 0 || unreachable > 4*c.Nodes() {
		t.Errorf("%s: %d \"kafka broker unreachable\" and %d \"reachable again\" lines, want one per outage (1 to %d)", mode, unreachable, back, 4*c.Nodes())
	}
	if n := strings.Count(logs, "unable to open connection to broker"); n != 0 && !strings.Contains(logs, `"level":"DEBUG"`) {
		t.Errorf("%s: %d of franz-go's per-attempt warnings at info level, want 0 (at debug)", mode, n)
	}
	// The counter belongs to the producer client: exactly-once replaces
	// its client after a transaction timeout or fence, and the new one
	// counts from 0 (a counter reset, which rate() handles).
	if outages < 1 || outages > float64(unreachable) {
		t.Errorf("%s: walbox_kafka_broker_outages_total = %v, want 1 to %d (the unreachable lines)", mode, outages, unreachable)
	}
	t.Logf("%s: replication sessions given up by the stall watch: %d", mode, strings.Count(logs, "the connection stopped delivering"))
	t.Logf("%s: walbox logged %d lines \"unable to open connection to broker\", %d \"kafka broker unreachable\", %d \"kafka broker reachable again\"; the run took %s",
		mode, strings.Count(logs, "unable to open connection to broker"), strings.Count(logs, "kafka broker unreachable"),
		strings.Count(logs, "kafka broker reachable again"), time.Since(began).Round(time.Second))
}

// metricValue returns the value of an unlabelled sample in a Prometheus
// text exposition, -1 when absent.
func metricValue(text, name string) float64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err == nil {
				return f
			}
		}
	}
	return -1
}

func slices0(ss []string, f func(string) bool) int {
	n := 0
	for _, s := range ss {
		if f(s) {
			n++
		}
	}
	return n
}

// crash SIGKILLs node id, restarts it (Kafka's log recovery; the restart
// waits out the killed incarnation's broker session) and waits until the
// cluster is fully replicated again. It returns how long Kafka itself took
// to recover: until the controller had fenced the node (it is in no ISR of
// topics, so acks=all can complete without it), or until it was back, if
// that came first.
func crash(ctx context.Context, t *testing.T, c *kafkatest.Cluster, id int, topics ...string) time.Duration {
	t.Helper()
	b := c.Node(id)
	fenced := make(chan time.Time, 1)
	wctx, stop := context.WithCancel(ctx)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		watchFenced(wctx, c, id, topics, fenced)
	}()
	defer func() { stop(); <-watched }()
	if err := b.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := b.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	back := time.Since(killed)
	recovered := back
	select {
	case at := <-fenced:
		recovered = min(back, at.Sub(killed))
	default:
	}
	t.Logf("node %d SIGKILLed at %s and back in %s; Kafka recovered without it (fenced, out of every ISR) after %s",
		id, killed.Format("15:04:05.000"), back.Round(10*time.Millisecond), recovered.Round(10*time.Millisecond))
	return recovered
}

// watchFenced sends on fenced when node id is in no ISR of topics, polling
// every 100 ms until ctx ends.
func watchFenced(ctx context.Context, c *kafkatest.Cluster, id int, topics []string, fenced chan<- time.Time) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.MetadataMinAge(50*time.Millisecond))
	if err != nil {
		return
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	seenIn := false // the node was in some ISR after the kill began
	for ctx.Err() == nil {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		td, err := adm.ListTopics(rctx, topics...)
		cancel()
		if err == nil && td.Error() == nil {
			in := false
			for _, name := range td.Names() {
				for _, p := range td[name].Partitions {
					in = in || slices.Contains(p.ISR, int32(id))
				}
			}
			seenIn = seenIn || in
			if seenIn && !in {
				fenced <- time.Now()
				return
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}

// layout says which node leads each partition of topics, which one is the
// active controller and, exactly once, walbox's transaction coordinator:
// what a crash of one node takes down.
func layout(ctx context.Context, c *kafkatest.Cluster, eos bool, topics ...string) string {
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		return err.Error()
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx, topics...)
	if err != nil {
		return err.Error()
	}
	var parts []string
	for _, name := range td.Names() {
		for _, p := range td[name].Partitions.Sorted() {
			parts = append(parts, fmt.Sprintf("%s[%d]@%d isr %v", name, p.Partition, p.Leader, p.ISR))
		}
	}
	ctrl, err := c.ActiveController(ctx)
	out := fmt.Sprintf("leaders %s; controller %d (%v)", strings.Join(parts, ", "), ctrl, err)
	if eos {
		coord, err := c.TxnCoordinator(ctx, "walbox-walbox")
		out += fmt.Sprintf("; transaction coordinator %d (%v)", coord, err)
	}
	return out
}

// checkReplication fails t unless every partition of topics has 3
// replicas and the topics' min.insync.replicas is 2.
func checkReplication(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	td, err := adm.ListTopics(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range topics {
		d, ok := td[name]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			t.Fatalf("topic %s: %+v", name, d)
		}
		for _, p := range d.Partitions {
			if len(p.Replicas) != 3 {
				t.Errorf("%s[%d]: replicas %v, want 3", name, p.Partition, p.Replicas)
			}
		}
		rc, err := cfgs.On(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, cv := range rc.Configs {
			if cv.Key == "min.insync.replicas" && cv.MaybeValue() != "2" {
				t.Errorf("%s: min.insync.replicas = %q, want 2", name, cv.MaybeValue())
			}
		}
	}
}

// createTopics creates topics as an operator would, with the brokers'
// default partition count and replication factor (3).
func createTopics(ctx context.Context, t *testing.T, c *kafkatest.Cluster, topics ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	res, err := kadm.NewClient(cl).CreateTopics(ctx, -1, -1, nil, topics...)
	if err == nil {
		err = res.Error()
	}
	if err != nil {
		t.Fatal(err)
	}
	names := make([]string, 0, len(topics))
	names = append(names, topics...)
	sort.Strings(names)
	t.Logf("created topics %v", names)
}
