package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestCutoverFromPollingRelay is issue 8's takeover with the built binary
// and a real Kafka broker: a polling relay (SELECT ... FOR UPDATE SKIP
// LOCKED, produce, UPDATE sent_at) publishes part of a backlog and stops
// cleanly while writers keep inserting; walbox takes over with
// --snapshot pending --snapshot-where "sent_at IS NULL". Every row must
// reach Kafka across relay and walbox, in per-aggregate order.
func TestCutoverFromPollingRelay(t *testing.T) {
	parallel(t)
	broker := kafkatest.Start(t)
	brokers := broker.Addrs()

	// Clean takeover: exactly once; a restart after it finished takes no
	// second snapshot and sends no duplicate.
	t.Run("clean", func(t *testing.T) {
		c := newCutover(t, brokers, "cutclean", 3000)
		c.relay(t, 1000)
		p := startWalbox(t, c.env, c.args...)
		c.waitLog(t, p, "snapshot: finished")
		rep := c.waitAll(t, false)
		t.Logf("clean takeover: %v", rep)
		if rep.Duplicates != 0 {
			t.Fatalf("%d duplicates across the relay, the snapshot and the WAL, want 0: %v", rep.Duplicates, rep)
		}
		if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Fatalf("walbox exited %d after SIGTERM", code)
		}
		// Restart with --snapshot still configured: no second snapshot.
		p = startWalbox(t, c.env, c.args...)
		c.waitLog(t, p, "not taking a snapshot")
		c.w.halt()
		rep = c.waitAll(t, true)
		t.Logf("after a graceful restart: %v", rep)
		if n := strings.Count(p.stderr.String(), "snapshot: reading outbox rows"); n != 0 {
			t.Fatalf("the restart read the snapshot again (%d times)", n)
		}
		// No backlog row (what a second snapshot would send) arrived twice.
		// (Events in flight at the SIGTERM are the graceful stop's business.)
		count := map[string]int{}
		for _, g := range c.col.snapshot() {
			count[g.Headers["event_id"]]++
		}
		for _, e := range c.w.events(t)[:c.backlog] {
			if count[e.ID] != 1 {
				t.Fatalf("backlog event %s delivered %d times, want once", e.ID, count[e.ID])
			}
		}
		if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Fatalf("walbox exited %d after SIGTERM", code)
		}
	})

	// SIGKILL while the snapshot is being produced: the restart with the
	// same flags drops the untouched slot and takes the snapshot again.
	// Duplicates of what was sent are allowed; loss and reordering are not.
	t.Run("sigkill during snapshot", func(t *testing.T) {
		c := newCutover(t, brokers, "cutkill", 30000)
		c.relay(t, 2000)
		// Slow the snapshot down to Kafka's round trips so the kill lands
		// inside it: few records in flight, a long linger.
		env := append(append([]string(nil), c.env...), "WALBOX_MAX_INFLIGHT_RECORDS=50", "WALBOX_PRODUCER_LINGER=20ms")
		p := startWalbox(t, env, c.args...)
		target := c.relayed + 2000
		waitUntil(c.ctx, t, 2*time.Minute, "snapshot records to arrive", func() bool {
			if p.exited() {
				t.Fatalf("walbox exited: %v", p.err)
			}
			return c.col.distinct() >= target
		})
		p.kill()
		if strings.Contains(p.stderr.String(), "snapshot: finished") {
			t.Fatal("the snapshot finished before the kill; the test did not kill it during the snapshot (raise the backlog)")
		}
		t.Logf("SIGKILL with %d distinct events consumed (%d from the relay)", c.col.distinct(), c.relayed)
		// Without --snapshot, walbox must not stream past the unfinished
		// snapshot (newer events before older pending rows).
		res := runWalboxToExit(t, c.env, nil, time.Minute)
		// Refused by the preflight, before anything starts: exit 2.
		checkFatal(t, res, 2, []string{"did not finish", "--snapshot", "COMMENT ON PUBLICATION"}, nil)
		p = startWalbox(t, c.env, c.args...)
		c.waitLog(t, p, "dropped its slot")
		c.waitLog(t, p, "snapshot: finished")
		if !strings.Contains(p.stderr.String(), `"msg":"snapshot progress","rows_done":`) || !strings.Contains(p.stderr.String(), `"rows_total":`) {
			t.Error("no progress line (rows done of total, rate) in the log")
		}
		c.w.halt()
		rep := c.waitAll(t, true)
		t.Logf("after SIGKILL during the snapshot: %v", rep)
		if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Fatalf("walbox exited %d after SIGTERM", code)
		}
	})

	// Postgres connections reset during the snapshot: walbox retries in
	// the same process, and the retry takes the snapshot again from the
	// start (at least once, in order) instead of streaming past it.
	t.Run("postgres connection reset during snapshot", func(t *testing.T) {
		fulltest.Require(t, "a lost connection during the snapshot; the short run kills walbox in it")
		c := newCutover(t, brokers, "cutreset", 30000)
		c.relay(t, 2000)
		proxy, err := faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", c.port))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = proxy.Close() })
		env := append(append([]string(nil), c.env...),
			fmt.Sprintf("WALBOX_PG_DSN=postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", proxy.Addr()),
			"WALBOX_MAX_INFLIGHT_RECORDS=50", "WALBOX_PRODUCER_LINGER=20ms")
		p := startWalbox(t, env, c.args...)
		target := c.relayed + 2000
		waitUntil(c.ctx, t, 2*time.Minute, "snapshot records to arrive", func() bool {
			if p.exited() {
				t.Fatalf("walbox exited: %v", p.err)
			}
			return c.col.distinct() >= target
		})
		proxy.Drop()
		time.Sleep(500 * time.Millisecond) // the outage's length, not synchronisation
		proxy.Restore()
		if strings.Contains(p.stderr.String(), "snapshot: finished") {
			t.Fatal("the snapshot finished before the reset (raise the backlog)")
		}
		c.waitLog(t, p, "dropped its slot")
		c.waitLog(t, p, "snapshot: finished")
		c.w.halt()
		rep := c.waitAll(t, true)
		t.Logf("after a connection reset during the snapshot: %v", rep)
		if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Fatalf("walbox exited %d after SIGTERM", code)
		}
	})

	// The old relay is still running when walbox starts and until its
	// snapshot finished: rows the relay marks sent after the snapshot was
	// taken are sent by both (duplicates), nothing is lost, and each
	// aggregate's first deliveries stay in order (both senders go in
	// commit order on the same partition).
	t.Run("relay still running", func(t *testing.T) {
		c := newCutover(t, brokers, "cutboth", 5000)
		c.relay(t, 500)
		stop := c.relayInBackground(t)
		p := startWalbox(t, c.env, c.args...)
		c.waitLog(t, p, "snapshot: finished")
		stop()
		c.w.halt()
		rep := c.waitAll(t, true)
		t.Logf("relay still running during the takeover: %v", rep)
		if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
			t.Fatalf("walbox exited %d after SIGTERM", code)
		}
	})
}

// relayInBackground keeps a polling relay running until the returned
// function is called; it returns once the relay stopped.
func (c *cutover) relayInBackground(t *testing.T) (stop func()) {
	t.Helper()
	conn, err := pgx.Connect(c.ctx, c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	quit, done := make(chan struct{}), make(chan struct{})
	var sent int
	var relayErr error
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			default:
			}
			k, err := pollOnce(c.ctx, conn, cl, c.prefix, 50)
			if err != nil {
				relayErr = err
				return
			}
			sent += k
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(quit)
			<-done
			conn.Close(context.Background())
			cl.Close()
			if relayErr != nil {
				t.Errorf("polling relay: %v", relayErr)
			}
			t.Logf("the polling relay published %d more rows while walbox took over", sent)
		})
	}
	t.Cleanup(stop)
	return stop
}

// cutover is one takeover scenario: a database with a backlog, a writer
// still inserting, a consumer of the scenario's topics.
type cutover struct {
	ctx     context.Context
	dsn     string
	brokers []string
	prefix  string
	env     []string
	args    []string
	w       *cutWriter
	col     *collector
	relayed int
	backlog int // the first backlog events were written before anything ran
	port    int // Postgres's port
}

func newCutover(t *testing.T, brokers []string, prefix string, backlog int) *cutover {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	pg := pgtest.Start(t)
	dsn := pg.DSN("postgres")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// The polling relay's table: the outbox plus its sent_at, and pos, the
	// order rows were inserted in, which the relay and the snapshot follow
	// (the uuid id does not follow any order).
	for _, sql := range []string{outboxtest.DDL, `ALTER TABLE public.outbox ADD COLUMN pos bigserial, ADD COLUMN sent_at timestamptz`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	c := &cutover{
		ctx: ctx, dsn: dsn, brokers: brokers, prefix: prefix, backlog: backlog, port: pg.Port(),
		env: []string{
			"WALBOX_PG_DSN=" + dsn,
			"WALBOX_KAFKA_BROKERS=" + strings.Join(brokers, ","),
			"WALBOX_STATUS_INTERVAL=200ms",
			"WALBOX_METRICS_ADDR=127.0.0.1:0",
			"WALBOX_RECONNECT_BACKOFF_MIN=100ms",
			"WALBOX_RECONNECT_BACKOFF_MAX=1s",
			"WALBOX_TOPIC=" + prefix + ".{aggregate_type}",
		},
		args: []string{"--snapshot", "pending", "--snapshot-where", "sent_at IS NULL", "--snapshot-order", "pos"},
		w:    &cutWriter{gen: outboxtest.NewGenerator(uint64(backlog), 100), stop: make(chan struct{}), done: make(chan struct{})},
	}
	c.col = startCollectorPattern(ctx, t, brokers, prefix+`\..*`)
	for n := 0; n < backlog; {
		k := min(500, backlog-n)
		if err := c.w.write(ctx, conn, k); err != nil {
			t.Fatal(err)
		}
		n += k
	}
	c.w.start(ctx, t, dsn, 10*time.Millisecond)
	return c
}

// relay runs a polling relay until it has published at least n rows, then
// stops it cleanly between two batches. Writers keep inserting meanwhile.
func (c *cutover) relay(t *testing.T, n int) {
	t.Helper()
	conn, err := pgx.Connect(c.ctx, c.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.brokers...), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for c.relayed < n {
		k, err := pollOnce(c.ctx, conn, cl, c.prefix, 100)
		if err != nil {
			t.Fatalf("polling relay: %v", err)
		}
		c.relayed += k
	}
	t.Logf("polling relay published %d rows and stopped", c.relayed)
}

// pollOnce is one cycle of a polling relay done right: one transaction
// locks a batch of unsent rows, produces them with acks=all, marks them
// sent and commits.
func pollOnce(ctx context.Context, conn *pgx.Conn, cl *kgo.Client, prefix string, batch int) (int, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, `SELECT id::text, aggregate_type, aggregate_id, event_type, payload::text, headers::text
FROM public.outbox WHERE sent_at IS NULL ORDER BY pos LIMIT $1 FOR UPDATE SKIP LOCKED`, batch)
	if err != nil {
		return 0, err
	}
	var (
		ids  []string
		recs []*kgo.Record
	)
	for rows.Next() {
		var id, aggType, aggID, eventType, payload, headers string
		if err := rows.Scan(&id, &aggType, &aggID, &eventType, &payload, &headers); err != nil {
			rows.Close()
			return 0, err
		}
		var hs map[string]string
		if err := json.Unmarshal([]byte(headers), &hs); err != nil {
			rows.Close()
			return 0, fmt.Errorf("row %s headers: %w", id, err)
		}
		rec := &kgo.Record{Topic: prefix + "." + aggType, Key: []byte(aggID), Value: []byte(payload),
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte(id)}, {Key: "event_type", Value: []byte(eventType)}}}
		for k, v := range hs {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		ids, recs = append(ids, id), append(recs, rec)
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	if len(ids) == 0 {
		return 0, tx.Commit(ctx)
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("produce: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE public.outbox SET sent_at = now() WHERE id = ANY($1::uuid[])`, ids); err != nil {
		return 0, err
	}
	return len(ids), tx.Commit(ctx)
}

func (c *cutover) waitLog(t *testing.T, p *proc, sub string) {
	t.Helper()
	waitUntil(c.ctx, t, 3*time.Minute, "walbox to log "+sub, func() bool {
		if p.exited() {
			t.Fatalf("walbox exited before logging %q: %v", sub, p.err)
		}
		return strings.Contains(p.stderr.String(), sub)
	})
}

// waitAll waits until everything written so far was delivered and checks
// loss, order and content; final says the writer has stopped.
func (c *cutover) waitAll(t *testing.T, final bool) outboxtest.Report {
	t.Helper()
	written := c.w.events(t)
	// Every written event, by its id: while the writer goes on, a count of
	// distinct ids reaches len(written) with later events too, some
	// written ones still on their way on a slower partition.
	missing := make(map[string]bool, len(written))
	for _, e := range written {
		missing[e.ID] = true
	}
	waitUntil(c.ctx, t, 3*time.Minute, fmt.Sprintf("the %d events written so far to be delivered", len(written)), func() bool {
		for _, r := range c.col.snapshot() {
			delete(missing, r.Headers["event_id"])
		}
		return len(missing) == 0
	})
	got := c.col.snapshot()
	rep := outboxtest.CheckPrefix(written, got, c.prefix+".")
	if final {
		if !rep.OK() || rep.Delivered != len(written) {
			t.Fatalf("cutover: %v", rep)
		}
		return rep
	}
	// The writer is still going: only what it wrote so far is checked.
	if rep.Lost != 0 || rep.OrderViolations != 0 {
		t.Fatalf("cutover: %v", rep)
	}
	return rep
}

// cutWriter writes the backlog and then keeps inserting with the same
// generator, so each aggregate's sequence runs across backlog, relay,
// snapshot and WAL.
type cutWriter struct {
	mu      sync.Mutex
	gen     *outboxtest.Generator
	written []outboxtest.Event
	err     error
	stop    chan struct{}
	done    chan struct{}
	once    sync.Once
}

func (w *cutWriter) write(ctx context.Context, conn *pgx.Conn, n int) error {
	evs := w.gen.Batch(n)
	if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
		return err
	}
	w.mu.Lock()
	w.written = append(w.written, evs...)
	w.mu.Unlock()
	return nil
}

func (w *cutWriter) start(ctx context.Context, t *testing.T, dsn string, interval time.Duration) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		tick := time.NewTicker(interval) // pacing, not synchronisation
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			if err := w.write(ctx, conn, 1+rng.IntN(10)); err != nil {
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
		}
	}()
	t.Cleanup(w.halt)
}

func (w *cutWriter) halt() {
	w.once.Do(func() { close(w.stop) })
	<-w.done
}

func (w *cutWriter) events(t *testing.T) []outboxtest.Event {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err != nil {
		t.Fatalf("writer: %v", w.err)
	}
	return append([]outboxtest.Event(nil), w.written...)
}
