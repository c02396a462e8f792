package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

// faultRow is one line of the fault suite's report.
type faultRow struct {
	scenario string
	report   outboxtest.Report
	recover  time.Duration
	note     string
}

// faultEnv is one scenario's world: its own Postgres (walbox reaches it
// through a fault proxy), the shared real Kafka broker, a writer, a
// read_committed consumer and the walbox process.
type faultEnv struct {
	t       *testing.T
	ctx     context.Context
	pg      *pgtest.Server
	proxy   *faultproxy.Proxy
	kproxy  *faultproxy.Proxy // between every Kafka client and the broker
	broker  *kafkatest.Broker
	prefix  string
	env     []string
	w       *writer
	col     *collector
	walbox  *proc
	metrics string
	// exactlyOnce: walbox runs with --delivery exactly-once, and a
	// duplicate fails the scenario.
	exactlyOnce bool
	// streamed is how many transactions the server streamed to walbox
	// before their commit, once checked (requireStreamed).
	streamed int64
}

const faultReceiveTimeout = 4 * time.Second

// extraEnv is appended to walbox's environment (exactly-once's options).
func newFaultEnv(ctx context.Context, t *testing.T, broker *kafkatest.Broker, kproxy *faultproxy.Proxy, name string, extraEnv ...string) *faultEnv {
	t.Helper()
	// walbox raises its receive timeout to wal_sender_timeout: keep it at
	// faultReceiveTimeout so a stalled connection is noticed within seconds.
	pg := pgtest.Start(t, func(o *pgtest.Options) {
		o.Settings = map[string]string{"wal_sender_timeout": faultReceiveTimeout.String()}
	})
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	if _, _, err := slotctl.Ensure(ctx, conn, slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}); err != nil {
		t.Fatal(err)
	}
	proxy, err := faultproxy.Start(fmt.Sprintf("127.0.0.1:%d", pg.Port()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	prefix := "faults." + name + "."
	e := &faultEnv{t: t, ctx: ctx, pg: pg, proxy: proxy, kproxy: kproxy, broker: broker, prefix: prefix}
	e.env = []string{
		fmt.Sprintf("WALBOX_PG_DSN=postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=5", proxy.Addr()),
		"WALBOX_KAFKA_BROKERS=" + kproxy.Addr(),
		"WALBOX_TOPIC=" + prefix + "{aggregate_type}",
		"WALBOX_STATUS_INTERVAL=200ms",
		"WALBOX_PG_RECEIVE_TIMEOUT=" + faultReceiveTimeout.String(),
		"WALBOX_RECONNECT_BACKOFF_MIN=100ms",
		"WALBOX_RECONNECT_BACKOFF_MAX=1s",
		"WALBOX_METRICS_ADDR=127.0.0.1:0",
		"WALBOX_LOG_LEVEL=info",
	}
	e.env = append(e.env, extraEnv...)
	// Transactions of 1 to 500 rows over 200 aggregates, a few per second.
	e.w = startWriter(ctx, t, pg.DSN("postgres"), rand.Uint64(), 200, 500, 1_000_000, 100*time.Millisecond)
	e.col = startCollectorPattern(ctx, t, []string{kproxy.Addr()}, strings.ReplaceAll(prefix, ".", `\.`)+".*")
	e.walbox = startWalbox(t, e.env)
	return e
}

// flowing waits until the consumer has n more events than now.
func (e *faultEnv) flowing(n int) {
	e.t.Helper()
	target := e.col.distinct() + n
	waitUntil(e.ctx, e.t, 2*time.Minute, fmt.Sprintf("%d more events to flow", n), func() bool {
		if e.walbox.exited() {
			e.t.Fatalf("walbox exited: %v", e.walbox.err)
		}
		return e.col.distinct() >= target
	})
}

// caughtUp waits until every event written so far has been consumed and
// returns how long that took.
func (e *faultEnv) caughtUp() time.Duration {
	e.t.Helper()
	start := time.Now()
	written, err := e.w.snapshot()
	if err != nil {
		e.t.Fatalf("writer: %v", err)
	}
	ids := make(map[string]struct{}, len(written))
	for _, ev := range written {
		ids[ev.ID] = struct{}{}
	}
	waitUntil(e.ctx, e.t, 3*time.Minute, fmt.Sprintf("the %d events written so far to be consumed", len(written)), func() bool {
		if e.walbox.exited() {
			e.t.Fatalf("walbox exited: %v", e.walbox.err)
		}
		for _, g := range e.col.snapshot() {
			delete(ids, g.Headers["event_id"])
		}
		return len(ids) == 0
	})
	return time.Since(start)
}

// finish stops the writer, waits for everything and checks delivery.
func (e *faultEnv) finish(scenario string, recover time.Duration, note string) faultRow {
	e.t.Helper()
	e.w.halt()
	e.caughtUp()
	written, _ := e.w.snapshot()
	rep := outboxtest.CheckPrefix(written, e.col.snapshot(), e.prefix)
	if !rep.OK() || rep.Delivered != len(written) {
		e.t.Errorf("%s: %v", scenario, rep)
	}
	if e.exactlyOnce && rep.Duplicates != 0 {
		e.t.Errorf("%s: %d duplicates with --delivery exactly-once, want 0: %v", scenario, rep.Duplicates, rep)
	}
	// The writer's transactions of more than about 220 rows stream (the test
	// servers' logical_decoding_work_mem is 64kB): every scenario must have
	// covered some.
	if e.streamed == 0 {
		e.streamed = requireStreamed(e.ctx, e.t, e.pg.DSN("postgres"), "walbox")
	}
	e.t.Logf("%s: %d transactions streamed", scenario, e.streamed)
	return faultRow{scenario: scenario, report: rep, recover: recover, note: note}
}

func (e *faultEnv) confirmedLSN() pglogrepl.LSN {
	e.t.Helper()
	conn, err := pgx.Connect(e.ctx, e.pg.DSN("postgres"))
	if err != nil {
		e.t.Fatal(err)
	}
	defer conn.Close(e.ctx)
	var lsn pglogrepl.LSN
	if err := conn.QueryRow(e.ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&lsn); err != nil {
		e.t.Fatal(err)
	}
	return lsn
}

// kafkaOutage is how long kafkaOutage keeps Kafka unusable: in the long
// suite longer than franz-go's request and retry timeouts, so walbox must
// outlive its own client's errors; in the short run long enough to see the
// slot held while nothing can be acknowledged.
var kafkaOutageLength = fulltest.Pick(12*time.Second, 30*time.Second)

// kafkaOutage makes Kafka unusable for kafkaOutageLength with begin, then ends it with
// end. walbox must keep running and must not move the slot while Kafka
// cannot acknowledge anything (after 5 s for acks already on their way to
// land). It returns the position the slot was held at.
func (e *faultEnv) kafkaOutage(what string, begin, end func() error) pglogrepl.LSN {
	e.t.Helper()
	e.flowing(300)
	if err := begin(); err != nil {
		e.t.Fatal(err)
	}
	time.Sleep(5 * time.Second) // the outage's length, not synchronisation
	frozen := e.confirmedLSN()
	time.Sleep(kafkaOutageLength - 5*time.Second) // the rest of the outage
	after := e.confirmedLSN()
	alive := !e.walbox.exited()
	if err := end(); err != nil {
		e.t.Fatal(err)
	}
	if after != frozen {
		e.t.Errorf("slot confirmed %s -> %s while Kafka was %s", frozen, after, what)
	}
	if !alive {
		e.t.Errorf("walbox exited while Kafka was %s: %v", what, e.walbox.err)
	}
	return frozen
}

// shortFaults are the scenarios of the short run: a crash of walbox, a
// Kafka outage, a Postgres crash and restart, a lost Postgres connection and
// a graceful stop, about a minute. The long suite (WALBOX_TEST_FULL=1) runs
// every scenario, with 20 kills and 30 s outages, and each again in
// exactly-once mode.
var shortFaults = []string{"walbox-sigkill", "kafka-unreachable", "postgres-crash", "pg-connection-dropped", "sigterm-under-load"}

// sigkills is how often walbox-sigkill kills walbox.
var sigkills = fulltest.Pick(5, 20)

// TestFaults injects each fault while a writer commits continuously and a
// real consumer reads everything back from a real Kafka broker; any loss or
// order violation fails, duplicates are counted and reported.
func TestFaults(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	// The broker advertises a proxy that forwards to it, so walbox's and
	// the consumer's connections to Kafka can be cut or stalled too.
	kproxy, err := faultproxy.StartListener()
	if err != nil {
		t.Fatal(err)
	}
	defer kproxy.Close()
	broker := kafkatest.Start(t, func(o *kafkatest.Options) {
		o.Advertise = func(addr string) string {
			if err := kproxy.SetTarget(addr); err != nil {
				t.Errorf("kafka proxy target: %v", err)
			}
			return kproxy.Addr()
		}
	})
	broker.RequireFaults(t)
	var rows []faultRow
	defer func() { printFaultReport(t, rows) }()

	scenarios := []faultScenario{
		{"walbox-sigkill", func(e *faultEnv) faultRow {
			rng := rand.New(rand.NewPCG(1, 2))
			e.flowing(200)
			for i := 0; i < sigkills; i++ {
				// A random moment: anywhere from mid-startup to well into
				// streaming.
				time.Sleep(time.Duration(50+rng.IntN(700)) * time.Millisecond) // the fault's timing, not synchronisation
				e.walbox.kill()
				e.walbox = startWalbox(e.t, e.env)
			}
			return e.finish(fmt.Sprintf("walbox SIGKILL x%d", sigkills), e.caughtUp(), "")
		}},
		{"kafka-sigkill", func(e *faultEnv) faultRow {
			e.flowing(300)
			if err := e.broker.Kill(); err != nil {
				e.t.Fatal(err)
			}
			if err := e.broker.Restart(e.ctx); err != nil {
				e.t.Fatal(err)
			}
			return e.finish("kafka SIGKILL + restart", e.caughtUp(), "")
		}},
		{"kafka-unreachable", func(e *faultEnv) faultRow {
			frozen := e.kafkaOutage("unreachable", e.broker.Pause, e.broker.Resume)
			return e.finish("kafka unreachable "+kafkaOutageLength.String(), e.caughtUp(), fmt.Sprintf("slot held at %s", frozen))
		}},
		{"kafka-connection-reset", func(e *faultEnv) faultRow {
			e.flowing(300)
			e.kproxy.Drop()
			time.Sleep(time.Second) // the outage's length
			e.kproxy.Restore()
			return e.finish("kafka connections reset", e.caughtUp(), "")
		}},
		{"kafka-connection-stalled", func(e *faultEnv) faultRow {
			frozen := e.kafkaOutage("stalled", func() error { e.kproxy.Blackhole(); return nil }, func() error { e.kproxy.Restore(); return nil })
			return e.finish("kafka connections stalled "+kafkaOutageLength.String(), e.caughtUp(), fmt.Sprintf("slot held at %s", frozen))
		}},
		{"postgres-crash", func(e *faultEnv) faultRow {
			e.flowing(300)
			// A crash discards the server's statistics: count before.
			e.streamed = requireStreamed(e.ctx, e.t, e.pg.DSN("postgres"), "walbox")
			if err := e.pg.StopImmediate(e.ctx); err != nil {
				e.t.Fatal(err)
			}
			if err := e.pg.Restart(e.ctx); err != nil {
				e.t.Fatal(err)
			}
			return e.finish("postgres immediate restart", e.caughtUp(), "")
		}},
		{"pg-connection-dropped", func(e *faultEnv) faultRow {
			e.flowing(300)
			e.proxy.Drop()
			time.Sleep(time.Second) // the outage's length
			e.proxy.Restore()
			return e.finish("postgres connection reset", e.caughtUp(), "")
		}},
		{"pg-connection-blackholed", func(e *faultEnv) faultRow {
			e.flowing(300)
			e.proxy.Blackhole()
			start := time.Now()
			waitUntil(e.ctx, e.t, faultReceiveTimeout+10*time.Second, "walbox to notice the stalled connection", func() bool {
				return strings.Contains(e.walbox.stderr.String(), "nothing received from the server")
			})
			noticed := time.Since(start)
			// Heal the partition but kill what was stalled, as a real
			// network's TCP timeouts eventually would.
			e.proxy.CloseAll()
			e.proxy.Restore()
			return e.finish("postgres connection stalled", e.caughtUp(), fmt.Sprintf("noticed after %s", noticed.Round(100*time.Millisecond)))
		}},
		{"sigterm-under-load", func(e *faultEnv) faultRow {
			e.flowing(500)
			if code := e.walbox.stop(e.t, syscall.SIGTERM, 45*time.Second); code != 0 {
				e.t.Errorf("exit code %d after SIGTERM, want 0", code)
			}
			before := len(e.col.snapshot())
			distinctBefore := e.col.distinct()
			e.walbox = startWalbox(e.t, e.env)
			row := e.finish("graceful SIGTERM + restart", e.caughtUp(), "")
			if row.report.Duplicates != before-distinctBefore {
				e.t.Errorf("the restart after SIGTERM produced %d duplicates, want 0", row.report.Duplicates-(before-distinctBefore))
			}
			return row
		}},
	}
	for _, sc := range scenarios {
		if !fulltest.Enabled() && !slices.Contains(shortFaults, sc.name) {
			continue
		}
		if !t.Run(sc.name, func(t *testing.T) {
			e := newFaultEnv(ctx, t, broker, kproxy, sc.name)
			rows = append(rows, sc.run(e))
		}) && ctx.Err() != nil {
			break
		}
	}
	if fulltest.Enabled() {
		runExactlyOnceFaults(ctx, t, broker, kproxy, scenarios, &rows)
	}
}

func printFaultReport(t *testing.T, rows []faultRow) {
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "scenario\twritten\tdelivered\tlost\tduplicates\torder violations\ttime to recover\tnote")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", r.scenario, r.report.Written, r.report.Delivered,
			r.report.Lost, r.report.Duplicates, r.report.OrderViolations, r.recover.Round(10*time.Millisecond), r.note)
	}
	tw.Flush()
	t.Logf("fault-injection report:\n%s", b.String())
	if path := os.Getenv("WALBOX_FAULT_REPORT"); path != "" {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Errorf("write fault report: %v", err)
		}
	}
}
