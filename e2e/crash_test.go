package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

// fixture is a Postgres with the outbox table, a broker and a writer.
type fixture struct {
	pg      *pgtest.Server
	brokers []string
	env     []string
}

func newFixture(t *testing.T, brokers []string) *fixture {
	t.Helper()
	ctx := context.Background()
	pg := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	// The slot must exist before the writer starts: a logical slot sees
	// only what is committed after its creation.
	if err := slotctl.EnsurePublication(ctx, conn, slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}); err != nil {
		t.Fatal(err)
	}
	return &fixture{
		pg:      pg,
		brokers: brokers,
		env: []string{
			"WALBOX_PG_DSN=" + pg.DSN("postgres"),
			"WALBOX_KAFKA_BROKERS=" + brokers[0],
			"WALBOX_STATUS_INTERVAL=200ms",
			"WALBOX_LOG_LEVEL=info",
			"WALBOX_METRICS_ADDR=127.0.0.1:0",
			"WALBOX_RECONNECT_BACKOFF_MIN=100ms",
			"WALBOX_RECONNECT_BACKOFF_MAX=1s",
		},
	}
}

// slotPosition describes the slot's confirmed position against the WAL end.
func (f *fixture) slotPosition(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, f.pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var confirmed, current string
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text, pg_current_wal_lsn()::text FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&confirmed, &current); err != nil {
		t.Fatal(err)
	}
	return "confirmed " + confirmed + ", wal end " + current
}

func kfakeBrokers(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

// writer commits outbox transactions of 1 to maxTxn rows until stopped.
// It rides out Postgres restarts: on an error it reconnects, and when a
// commit's outcome is unknown (the connection died during COMMIT) it asks
// the database whether the transaction's first row exists.
type writer struct {
	mu      sync.Mutex
	written []outboxtest.Event
	err     error
	stop    chan struct{}
	done    chan struct{}
}

// Transactions are paced by interval so the run spans the faults injected
// meanwhile (pacing, not synchronisation: no assertion depends on it).
//
// With withLargeTxns(n), every n-th transaction has streamTxnRows rows
// instead, so that it streams to walbox before its commit.
func startWriter(ctx context.Context, t *testing.T, dsn string, seed uint64, aggregates, maxTxn, limit int, interval time.Duration, opts ...writerOption) *writer {
	t.Helper()
	var cfg writerConfig
	for _, o := range opts {
		o(&cfg)
	}
	w := &writer{stop: make(chan struct{}), done: make(chan struct{})}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	gen := outboxtest.NewGenerator(seed, aggregates)
	rng := rand.New(rand.NewPCG(seed, 99))
	go func() {
		defer close(w.done)
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for n, txns := 0, 0; n < limit; {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			size := 1 + rng.IntN(maxTxn)
			if txns++; cfg.largeEvery > 0 && txns%cfg.largeEvery == 0 {
				size = streamTxnRows
			}
			evs := gen.Batch(size)
			err := outboxtest.WriteTx(ctx, conn, evs)
			if err != nil {
				conn.Close(context.Background())
				if conn, err = w.reconnect(ctx, dsn); err != nil {
					w.setErr(err)
					return
				}
				var committed bool
				if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM public.outbox WHERE id = $1)`, evs[0].ID).Scan(&committed); err != nil {
					w.setErr(fmt.Errorf("check an ambiguous commit: %w", err))
					return
				}
				if !committed {
					continue
				}
			}
			n += len(evs)
			w.mu.Lock()
			w.written = append(w.written, evs...)
			w.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.halt() })
	return w
}

type writerConfig struct{ largeEvery int }

type writerOption func(*writerConfig)

// streamTxnRows outbox rows in one transaction exceed the test servers'
// logical_decoding_work_mem (pgtest sets the minimum, 64kB, which about 220
// of outboxtest's rows fill), so the server streams such a transaction
// before its commit.
const streamTxnRows = 300

// withLargeTxns makes every n-th transaction of the writer streamTxnRows
// rows long, so that a suite of small transactions streams some too.
func withLargeTxns(n int) writerOption { return func(c *writerConfig) { c.largeEvery = n } }

// requireStreamed fails t unless the server streamed at least one
// transaction to the slot before its commit
// (pg_stat_replication_slots.stream_txns), so that a suite meant to cover
// streaming cannot silently stop doing so, e.g. when its transactions shrink
// or the servers' logical_decoding_work_mem grows. It polls: PostgreSQL 14
// reports the statistics asynchronously. It returns the count.
func requireStreamed(ctx context.Context, t *testing.T, dsn, slot string) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var txns int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := conn.QueryRow(ctx, `SELECT coalesce((SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1), 0)`, slot).Scan(&txns)
		if err != nil {
			t.Fatalf("pg_stat_replication_slots of %s: %v", slot, err)
		}
		if txns > 0 {
			return txns
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server streamed no transaction to slot %s (pg_stat_replication_slots.stream_txns = 0): this run did not cover streaming; does a transaction exceed logical_decoding_work_mem?", slot)
		}
		select {
		case <-ctx.Done():
			t.Fatalf("waiting for slot %s's statistics: %v", slot, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (w *writer) setErr(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.err == nil {
		w.err = err
	}
}

// reconnect retries until Postgres accepts a connection, for up to two
// minutes. It ignores a halt: the outcome of the failed transaction must be
// learnt before the writer's record of what it wrote is final.
func (w *writer) reconnect(ctx context.Context, dsn string) (*pgx.Conn, error) {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		conn, err := pgx.Connect(cctx, dsn)
		cancel()
		if err == nil {
			return conn, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("postgres unreachable for 2 minutes: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond): // retry interval
		}
	}
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *writer) snapshot() ([]outboxtest.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]outboxtest.Event(nil), w.written...), w.err
}

// collector consumes in the background.
type collector struct {
	mu  sync.Mutex
	got []outboxtest.Received
	err error
}

func startCollector(ctx context.Context, t *testing.T, brokers []string) *collector {
	t.Helper()
	return startCollectorPattern(ctx, t, brokers, `outbox\.event\..*`)
}

func startCollectorPattern(ctx context.Context, t *testing.T, brokers []string, pattern string) *collector {
	t.Helper()
	return startCollectorWith(ctx, t, brokers, pattern)
}

func (c *collector) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return outboxtest.DistinctIDs(c.got)
}

func (c *collector) snapshot() []outboxtest.Received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]outboxtest.Received(nil), c.got...)
}

// TestCrashRestartLosesNothing kills walbox with SIGKILL mid-stream several
// times while a writer keeps committing, restarts it each time, and checks
// that after dedup by event_id every event arrived in per-aggregate order.
func TestCrashRestartLosesNothing(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	f := newFixture(t, kfakeBrokers(t))
	const kills = 4
	// The writer runs until the kills are done, so every kill lands while
	// transactions are still being committed; the limit is only a backstop.
	// Every 10th transaction is large enough to stream, so some kills land
	// while one is in the spool.
	w := startWriter(ctx, t, f.pg.DSN("postgres"), 7, 50, 40, 200_000, 20*time.Millisecond, withLargeTxns(10))
	col := startCollector(ctx, t, f.brokers)

	p := startWalbox(t, f.env)
	for k := 1; k <= kills; k++ {
		// Kill while events are flowing: once this process has moved a
		// few hundred new events, with the writer still committing.
		target := col.distinct() + 400
		waitUntil(ctx, t, time.Minute, "progress before kill", func() bool {
			if p.exited() {
				t.Fatalf("walbox exited on its own: %v", p.err)
			}
			return col.distinct() >= target
		})
		p.kill()
		written, _ := w.snapshot()
		t.Logf("kill %d: SIGKILL with %d distinct events consumed of %d written; slot %s", k, col.distinct(), len(written), f.slotPosition(t))
		p = startWalbox(t, f.env)
	}
	// Let the last process move some events before the writer stops.
	target := col.distinct() + 400
	waitUntil(ctx, t, time.Minute, "progress after the last restart", func() bool { return col.distinct() >= target })
	w.halt()
	written, err := w.snapshot()
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitUntil(ctx, t, 2*time.Minute, "every event to be delivered", func() bool {
		return col.distinct() >= len(written)
	})
	rep := outboxtest.Check(written, col.snapshot())
	t.Logf("after %d kills: %v", kills, rep)
	if !rep.OK() || rep.Delivered != len(written) {
		t.Fatalf("crash test failed: %v", rep)
	}
	t.Logf("%d transactions streamed", requireStreamed(ctx, t, f.pg.DSN("postgres"), "walbox"))
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox exit code %d after SIGTERM, want 0", code)
	}
}

// TestGracefulStopThenRestartSendsNoDuplicates: SIGTERM under load exits 0
// after confirming exactly what Kafka acked, so the next start resends
// nothing.
func TestGracefulStopThenRestartSendsNoDuplicates(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFixture(t, kfakeBrokers(t))
	// Every 5th transaction streams, so the SIGTERM may find one in the spool.
	w := startWriter(ctx, t, f.pg.DSN("postgres"), 11, 50, 100, 200_000, 20*time.Millisecond, withLargeTxns(5))
	col := startCollector(ctx, t, f.brokers)
	p := startWalbox(t, f.env)
	waitUntil(ctx, t, time.Minute, "events to flow", func() bool { return col.distinct() >= 1000 })
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM under load, want 0", code)
	}
	p = startWalbox(t, f.env)
	target := col.distinct() + 1000
	waitUntil(ctx, t, time.Minute, "events to flow after the restart", func() bool { return col.distinct() >= target })
	w.halt()
	written, err := w.snapshot()
	if err != nil {
		t.Fatalf("writer: %v", err)
	}
	waitUntil(ctx, t, 2*time.Minute, "every event to be delivered", func() bool {
		return col.distinct() >= len(written)
	})
	rep := outboxtest.Check(written, col.snapshot())
	t.Logf("graceful restart: %v", rep)
	if !rep.OK() || rep.Delivered != len(written) {
		t.Fatalf("graceful restart lost or reordered events: %v", rep)
	}
	if rep.Duplicates != 0 {
		t.Fatalf("%d duplicates after a graceful stop, want 0", rep.Duplicates)
	}
	t.Logf("%d transactions streamed", requireStreamed(ctx, t, f.pg.DSN("postgres"), "walbox"))
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("exit code %d after final SIGTERM, want 0", code)
	}
}
