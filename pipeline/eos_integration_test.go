package pipeline_test

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// eosRun is one exactly-once relay running against the real services.
type eosRun struct {
	relay  *pipeline.Relay
	reg    *prometheus.Registry
	cancel context.CancelFunc
	done   chan error
}

// relayN numbers the relays in the logs (of tests that run in parallel too).
var relayN atomic.Int64

// startEOSRelay runs a relay with --delivery exactly-once on slot, from the
// slot's confirmed position, with its own transactional client.
func startEOSRelay(t *testing.T, conn *pgx.Conn, dsn string, brokers []string, slot, stateTopic string, mutate func(*pipeline.Config)) *eosRun {
	t.Helper()
	ctx := context.Background()
	var start pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&start); err != nil {
		t.Fatal(err)
	}
	log := testLogger(t).With("relay", relayN.Add(1))
	reg := prometheus.NewRegistry()
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := pipeline.Config{
		ConnString: dsn, Slot: slot, Publication: "walbox",
		// Only the status update after each commit confirms; the periodic
		// one would blur "between commit and confirm".
		StatusInterval: time.Hour, MaxInflightRecords: 2000,
		Delivery: pipeline.DeliveryExactlyOnce, TransactionMaxRecords: 100, TransactionMaxInterval: time.Hour,
		State: pipeline.NewKafkaState(pipeline.KafkaConfig{Brokers: brokers}, stateTopic),
		// A killed predecessor's walsender is terminated by the test.
		SlotBusyTimeout: time.Minute,
	}
	if mutate != nil {
		mutate(&cfg)
	}
	// A new client per session, as walbox run does; the last one is closed
	// after Run.
	kc := pipeline.KafkaConfig{Brokers: brokers, MaxBufferedRecords: 2002, TransactionalID: pipeline.TransactionalIDFor(slot),
		TransactionTimeout: cfg.TransactionTimeout}
	cl, err := pipeline.NewKafkaClient(kc, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	var current atomic.Pointer[kgo.Client]
	current.Store(cl)
	cfg.NewTxnProducer = func() (pipeline.TxnProducer, error) {
		next, err := pipeline.NewKafkaClient(kc, log, reg)
		if err == nil {
			current.Store(next)
		}
		return next, err
	}
	relay, err := pipeline.New(cfg, cl, rt, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &eosRun{relay: relay, reg: reg, cancel: cancel, done: make(chan error, 1)}
	go func() {
		r.done <- relay.Run(rctx, start)
		current.Load().Close()
	}()
	return r
}

// stop cancels the relay and returns what Run returned.
func (r *eosRun) stop(t *testing.T) error {
	t.Helper()
	r.cancel()
	select {
	case err := <-r.done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("relay did not stop within a minute")
		return nil
	}
}

// killWalsender ends the replication connection of slot as a process
// death does, and waits until the slot is free.
func killWalsender(t *testing.T, conn *pgx.Conn, slot string) {
	t.Helper()
	ctx := context.Background()
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`, slot); err != nil {
		t.Fatal(err)
	}
	// Generous: on a loaded 2-core machine a walsender in the middle of
	// decoding a large transaction was seen to take over 30 s to go.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		var active bool
		var pid *int
		if err := conn.QueryRow(ctx, `SELECT active, active_pid FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active, &pid); err != nil {
			t.Fatal(err)
		}
		if !active {
			return
		}
		if time.Now().After(deadline) {
			var state string
			_ = conn.QueryRow(ctx, `SELECT format('pid %s, state %s, wait %s/%s, backend_type %s', pid, state, wait_event_type, wait_event, backend_type)
				FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&state)
			t.Fatalf("slot %s still active 2 minutes after its walsender was terminated: %s", slot, state)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

// TestRelayExactlyOnceAcrossKills: real Postgres, real broker, a
// read_committed consumer. An instance "dies" (its relay is frozen in the
// phase hook, its walsender terminated, a successor started with the same
// transactional id):
//   - between commit and slot confirm: the slot sends the committed
//     transactions again and the successor skips them (state topic);
//   - between produce and commit: the successor's producer id load aborts
//     the open transaction, nothing of it is visible to read_committed, the
//     frozen instance is fenced when it tries to commit, and the successor
//     produces the rows again.
//
// Either way every row arrives exactly once, in order per aggregate.
func TestRelayExactlyOnceAcrossKills(t *testing.T) {
	fulltest.Require(t, "a frozen exactly-once instance fenced by its successor; the short run kills at each phase in e2e")
	broker := kafkatest.Start(t)
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	stateTopic := "walbox.state." + strconv.FormatInt(time.Now().UnixNano(), 36)
	for _, tt := range []struct {
		name  string
		phase string
		seed  uint64
	}{
		{name: "between commit and confirm", phase: pipeline.PhaseCommitted, seed: 7},
		{name: "between produce and commit", phase: pipeline.PhaseProduced, seed: 8},
	} {
		t.Run(tt.name, func(t *testing.T) {
			slot := "eos_" + tt.phase
			aggType := "eos" + tt.phase + strconv.FormatInt(time.Now().UnixNano(), 36)
			scfg := slotctl.Config{Table: "public.outbox", Slot: slot, Publication: "walbox", CreateMissing: true}
			if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
				t.Fatal(err)
			}
			if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
				t.Fatal(err)
			}
			gen := outboxtest.NewGenerator(tt.seed, 20, aggType)
			var written []outboxtest.Event
			for range 30 {
				evs := gen.Batch(10)
				if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
					t.Fatal(err)
				}
				written = append(written, evs...)
			}

			// The first instance commits its first Kafka transaction and
			// freezes at the phase of its second.
			frozen, release := make(chan struct{}), make(chan struct{})
			seen := 0
			first := startEOSRelay(t, conn, srv.DSN("postgres"), broker.Addrs(), slot, stateTopic, func(c *pipeline.Config) {
				c.TxnPhase = func(p string) {
					if p != tt.phase {
						return
					}
					if seen++; seen == 2 {
						close(frozen)
						<-release
					}
				}
			})
			select {
			case <-frozen:
			case err := <-first.done:
				t.Fatalf("first relay ended before the hook: %v", err)
			case <-ctx.Done():
				t.Fatal("the first relay never reached its second transaction's phase")
			}
			var confirmed pglogrepl.LSN
			if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&confirmed); err != nil {
				t.Fatal(err)
			}
			killWalsender(t, conn, slot)

			if tt.phase == pipeline.PhaseProduced {
				// The open transaction's records are in the log, but
				// read_committed must not see them: the consumer stops
				// at the open transaction.
				c, err := outboxtest.NewConsumer(broker.Addrs(), "outbox\\.event\\."+aggType)
				if err != nil {
					t.Fatal(err)
				}
				pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
				got, _ := c.ReadUntil(pctx, func(got []outboxtest.Received) bool { return len(got) > 100 })
				pcancel()
				c.Close()
				if len(got) != 100 {
					t.Fatalf("read_committed saw %d records while the second transaction was open, want the first transaction's 100", len(got))
				}
			}

			second := startEOSRelay(t, conn, srv.DSN("postgres"), broker.Addrs(), slot, stateTopic, nil)
			consumer, err := outboxtest.NewConsumer(broker.Addrs(), "outbox\\.event\\."+aggType)
			if err != nil {
				t.Fatal(err)
			}
			defer consumer.Close()
			got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool {
				return outboxtest.DistinctIDs(got) >= len(written)
			})
			if err != nil {
				t.Fatalf("consume: %v (report: %v)", err, outboxtest.Check(written, got))
			}
			if tt.phase == pipeline.PhaseCommitted {
				// The first instance may have committed everything
				// before the second streams: wait until the second has
				// received the 20 transactions after the slot's position
				// (the end of the first Kafka transaction, 10 of them).
				waitFor(t, time.Minute, "the second instance to receive the re-sent transactions", func() bool {
					return metricValue(t, second.reg, "walbox_transactions_total") >= 20
				})
			}
			// Let the frozen instance go on: it must not confirm nor
			// commit anything now.
			first.cancel()
			close(release)
			ferr := <-first.done
			if tt.phase == pipeline.PhaseProduced && !errors.Is(ferr, pipeline.ErrFenced) {
				t.Errorf("frozen instance ended with %v, want ErrFenced", ferr)
			}
			if err := second.stop(t); err != nil {
				t.Fatalf("second relay: %v", err)
			}
			// Anything late would come now: the last poll sees the
			// stream after both instances ended.
			pctx, pcancel := context.WithTimeout(ctx, time.Second)
			more, _ := consumer.Poll(pctx)
			pcancel()
			got = append(got, more...)
			rep := outboxtest.Check(written, got)
			t.Logf("slot confirmed %s when the first instance froze; report: %v", confirmed, rep)
			if !rep.OK() || rep.Duplicates != 0 || rep.Delivered != len(written) {
				t.Fatalf("exactly-once check failed: %v", rep)
			}
			skipped := metricValue(t, second.reg, "walbox_transactions_skipped_total")
			aborted := metricValue(t, second.reg, "walbox_kafka_transactions_total", "result", "aborted")
			t.Logf("second instance skipped %v postgres transactions, aborted %v kafka transactions", skipped, aborted)
			// The second Kafka transaction holds at least the 10 Postgres
			// transactions after the first's 100 rows (more if they were
			// routed while the first committed).
			if tt.phase == pipeline.PhaseCommitted && skipped < 10 {
				t.Errorf("the second instance skipped %v postgres transactions, want at least the 10 the first had committed past the slot's position", skipped)
			}
			// Only the first Kafka transaction (10 Postgres transactions)
			// committed; if the walsender died before it applied the
			// confirm, they come again and are skipped. Skipping more
			// would lose the aborted ones (the report would say so too).
			if tt.phase == pipeline.PhaseProduced && skipped > 10 {
				t.Errorf("the second instance skipped %v transactions, more than the first committed", skipped)
			}
		})
	}
}

// TestRelayExactlyOnceSurvivesAFrozenBroker: Kafka transactions outlive
// the transaction timeout. First the broker is frozen (SIGSTOP) for longer
// than it while walbox streams (after the resume walbox may commit before
// the broker's cleanup aborts it); then walbox itself stalls between
// producing a transaction and committing it, so the broker aborts it and
// bumps the epoch for sure. walbox used to take that for fencing and stop
// for good; it must go on streaming in the same process, every event
// delivered once.
func TestRelayExactlyOnceSurvivesAFrozenBroker(t *testing.T) {
	fulltest.Require(t, "a real broker frozen past the transaction timeout; the short run times a transaction out on kfake")
	broker := kafkatest.Start(t, kafkatest.WithProperty("transaction.abort.timed.out.transaction.cleanup.interval.ms", "500"))
	if !broker.CanFault() {
		t.Skip("the broker is external: it cannot be frozen")
	}
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	const slot = "eos_frozen"
	scfg := slotctl.Config{Table: "public.outbox", Slot: slot, Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	aggType := "frozen" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var stall atomic.Bool
	stalled := make(chan struct{})
	run := startEOSRelay(t, conn, srv.DSN("postgres"), broker.Addrs(), slot, "walbox.state.frozen", func(c *pipeline.Config) {
		c.TransactionTimeout = 5 * time.Second
		c.TransactionMaxRecords, c.TransactionMaxInterval = 100, 200*time.Millisecond
		c.StatusInterval = time.Second
		c.TxnPhase = func(p string) {
			if p == pipeline.PhaseProduced && stall.CompareAndSwap(true, false) {
				close(stalled)
				time.Sleep(8 * time.Second) // past the timeout, before the commit
			}
		}
	})
	gen := outboxtest.NewGenerator(11, 10, aggType)
	var written []outboxtest.Event
	write := func(n int) {
		t.Helper()
		for range n {
			evs := gen.Batch(5)
			if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
				t.Fatal(err)
			}
			written = append(written, evs...)
		}
	}
	write(20)
	waitFor(t, time.Minute, "the first kafka transaction to commit", func() bool {
		return metricValue(t, run.reg, "walbox_kafka_transactions_total", "result", "committed") >= 1
	})
	if err := broker.Pause(); err != nil {
		t.Fatal(err)
	}
	write(20) // routed into a transaction the frozen broker cannot commit
	time.Sleep(12 * time.Second)
	if err := broker.Resume(); err != nil {
		t.Fatal(err)
	}
	write(20)
	stall.Store(true)
	write(20)
	select {
	case <-stalled:
	case <-time.After(time.Minute):
		t.Fatal("no transaction reached the stall")
	}
	write(20)
	consumer, err := outboxtest.NewConsumer(broker.Addrs(), "outbox\\.event\\."+aggType)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return outboxtest.DistinctIDs(got) >= len(written) })
	if err != nil {
		t.Fatalf("consume: %v (report: %v)", err, outboxtest.Check(written, got))
	}
	select {
	case err := <-run.done:
		t.Fatalf("the relay stopped: %v", err)
	default:
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	more, _ := consumer.Poll(pctx)
	pcancel()
	got = append(got, more...)
	if err := run.stop(t); err != nil {
		t.Fatalf("relay: %v", err)
	}
	rep := outboxtest.Check(written, got)
	t.Logf("report: %v; kafka transaction timeouts %v, aborted %v", rep,
		metricValue(t, run.reg, "walbox_kafka_transaction_timeouts_total"),
		metricValue(t, run.reg, "walbox_kafka_transactions_total", "result", "aborted"))
	if !rep.OK() || rep.Duplicates != 0 || rep.Delivered != len(written) {
		t.Fatalf("exactly-once check failed: %v", rep)
	}
	if n := metricValue(t, run.reg, "walbox_kafka_transaction_timeouts_total"); n < 1 {
		t.Errorf("walbox_kafka_transaction_timeouts_total = %v, want the stalled transaction counted", n)
	}
}
