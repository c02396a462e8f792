package pipeline_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"golang.org/x/sync/errgroup"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// env is one relay streaming from a throwaway Postgres into kfake.
type env struct {
	srv      *pgtest.Server
	conn     *pgx.Conn
	brokers  []string
	relay    *pipeline.Relay
	cfg      pipeline.Config
	cancel   context.CancelFunc
	group    *errgroup.Group
	reg      *prometheus.Registry
	slotName string
	// done receives what Run returned; a test expecting an error takes it.
	done chan error
}

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

func startEnv(t *testing.T, statusInterval time.Duration, opts ...func(*pgtest.Options)) *env {
	t.Helper()
	return startEnvWith(t, statusInterval, nil, opts...)
}

func startEnvWith(t *testing.T, statusInterval time.Duration, mutate func(*pipeline.Config), opts ...func(*pgtest.Options)) *env {
	t.Helper()
	return startEnvDDL(t, outboxtest.DDL, statusInterval, mutate, opts...)
}

// startEnvDDL is startEnvWith with the schema set up by ddl (run before the
// publication and slot are created) instead of the recommended outbox table.
func startEnvDDL(t *testing.T, ddl string, statusInterval time.Duration, mutate func(*pipeline.Config), opts ...func(*pgtest.Options)) *env {
	t.Helper()
	return startEnvKafka(t, nil, ddl, statusInterval, mutate, opts...)
}

// startEnvKafka is startEnvDDL producing to brokers (a real broker from
// internal/kafkatest, say); nil starts a kfake cluster.
func startEnvKafka(t *testing.T, brokers []string, ddl string, statusInterval time.Duration, mutate func(*pipeline.Config), opts ...func(*pgtest.Options)) *env {
	t.Helper()
	ctx := context.Background()
	srv := pgtest.Start(t, opts...)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, ddl); err != nil {
		t.Fatal(err)
	}
	slotCfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, slotCfg); err != nil {
		t.Fatal(err)
	}
	slot, err := slotctl.EnsureSlot(ctx, conn, slotCfg)
	if err != nil {
		t.Fatal(err)
	}

	if brokers == nil {
		cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cluster.Close)
		brokers = cluster.ListenAddrs()
	}
	e := &env{srv: srv, conn: conn, brokers: brokers, slotName: "walbox", reg: prometheus.NewRegistry()}
	log := testLogger(t)
	limits := pipeline.NewKafkaTopicLimits()
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: e.brokers, MaxBufferedRecords: 2001, TopicLimits: limits}, log, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e.cfg = pipeline.Config{
		ConnString: srv.DSN("postgres"), Slot: "walbox", Publication: "walbox",
		StatusInterval: statusInterval, DedupWindow: 10000, MaxInflightRecords: 2000,
		TopicLimits: limits,
	}
	if mutate != nil {
		mutate(&e.cfg)
	}
	e.relay, err = pipeline.New(e.cfg, kcl, rt, e.reg, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	e.cancel = cancel
	e.group = &errgroup.Group{}
	e.done = make(chan error, 1)
	e.group.Go(func() error {
		e.done <- e.relay.Run(rctx, pglogrepl.LSN(slot.ConfirmedFlushLSN))
		return nil
	})
	t.Cleanup(func() {
		cancel()
		_ = e.group.Wait()
		select {
		case err := <-e.done:
			if err != nil {
				t.Errorf("relay: %v", err)
			}
		default: // taken by the test
		}
	})
	return e
}

func (e *env) confirmedFlush(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var lsn pglogrepl.LSN
	if err := e.conn.QueryRow(context.Background(),
		`SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1`, e.slotName).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
}

func TestRelayDeliversEveryEventInOrderAndConfirmsTheSlot(t *testing.T) {
	parallel(t)
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		testDelivery(t, pgtest.WithBinDir(v.BinDir))
	})
}

func testDelivery(t *testing.T, opts ...func(*pgtest.Options)) {
	const statusInterval = time.Second
	e := startEnv(t, statusInterval, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// An independent oracle for commit end LSNs: a test_decoding slot sees
	// the same transactions, and its COMMIT rows carry their end LSN.
	if _, err := e.conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('probe', 'test_decoding')`); err != nil {
		t.Fatal(err)
	}

	gen := outboxtest.NewGenerator(1, 50)
	var written []outboxtest.Event
	for _, plan := range []struct{ txns, size int }{{300, 1}, {100, 10}, {3, 1000}} {
		for i := 0; i < plan.txns; i++ {
			evs := gen.Batch(plan.size)
			if err := outboxtest.WriteTx(ctx, e.conn, evs); err != nil {
				t.Fatal(err)
			}
			written = append(written, evs...)
		}
	}

	consumer, err := outboxtest.NewConsumer(e.brokers, "outbox\\.event\\..*")
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool {
		return outboxtest.DistinctIDs(got) >= len(written)
	})
	allAcked := time.Now()
	if err != nil {
		t.Fatalf("consume: %v (report: %v)", err, outboxtest.Check(written, got))
	}
	rep := outboxtest.Check(written, got)
	t.Logf("report: %v", rep)
	if !rep.OK() || rep.Delivered != len(written) {
		t.Fatalf("delivery check failed: %v", rep)
	}
	if rep.Duplicates != 0 {
		t.Errorf("%d duplicates without any failure", rep.Duplicates)
	}
	// The 1,000-row transactions exceed the test server's
	// logical_decoding_work_mem, so they came through streaming.
	if got := metricSum(t, e.reg, "walbox_streamed_transactions_total"); got < 3 {
		t.Errorf("walbox_streamed_transactions_total = %v, want the 3 transactions of 1,000 rows: they did not stream", got)
	}

	var lastCommitEnd pglogrepl.LSN
	if err := e.conn.QueryRow(ctx,
		`SELECT max(lsn) FROM pg_logical_slot_peek_changes('probe', NULL, NULL) WHERE data LIKE 'COMMIT%'`).Scan(&lastCommitEnd); err != nil {
		t.Fatal(err)
	}
	if _, err := e.conn.Exec(ctx, `SELECT pg_drop_replication_slot('probe')`); err != nil {
		t.Fatal(err)
	}
	// The ack of the last record happened before the consumer saw it, so
	// one status interval after allAcked is a generous bound; the extra
	// second absorbs scheduling on a loaded 2-core CI machine.
	waitFor(t, 2*statusInterval+time.Second, "confirmed_flush_lsn to reach the last commit "+lastCommitEnd.String(), func() bool {
		return e.confirmedFlush(t) >= lastCommitEnd
	})
	t.Logf("slot confirmed %s (last commit end %s) %s after the consumer had everything",
		e.confirmedFlush(t), lastCommitEnd, time.Since(allAcked).Round(time.Millisecond))

	// walbox never updates the outbox. Wait until the statistics show
	// every insert, so a zero n_tup_upd is not just stale statistics.
	var ins, upd int64
	waitFor(t, 10*time.Second, "pg_stat_user_tables to count the inserts", func() bool {
		if err := e.conn.QueryRow(ctx,
			`SELECT n_tup_ins, n_tup_upd FROM pg_stat_user_tables WHERE relname = 'outbox'`).Scan(&ins, &upd); err != nil {
			t.Fatal(err)
		}
		return ins >= int64(len(written))
	})
	if upd != 0 {
		t.Fatalf("outbox n_tup_upd = %d, want 0", upd)
	}
}

// TestRelayAdvancesIdleSlot: a busy database whose outbox is idle must not
// make the slot retain WAL without bound.
func TestRelayAdvancesIdleSlot(t *testing.T) {
	parallel(t)
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		testIdleSlot(t, pgtest.WithBinDir(v.BinDir))
	})
}

func testIdleSlot(t *testing.T, opts ...func(*pgtest.Options)) {
	e := startEnv(t, 200*time.Millisecond, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := e.conn.Exec(ctx, `CREATE TABLE other (id bigserial PRIMARY KEY, v text)`); err != nil {
		t.Fatal(err)
	}
	if err := outboxtest.WriteTx(ctx, e.conn, outboxtest.NewGenerator(2, 5).Batch(5)); err != nil {
		t.Fatal(err)
	}
	var mark pglogrepl.LSN
	for i := 0; i < 20; i++ {
		if _, err := e.conn.Exec(ctx, `INSERT INTO other (v) SELECT repeat('x', 200) FROM generate_series(1, 500)`); err != nil {
			t.Fatal(err)
		}
		if i == 9 {
			if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&mark); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor(t, 30*time.Second, "the idle slot to be confirmed past "+mark.String(), func() bool {
		return e.confirmedFlush(t) >= mark
	})
}

// TestRelayStopsOnInvalidRow: under the default fail policy an invalid row
// stops the relay with an error naming it, and the slot is not confirmed
// past it.
func TestRelayStopsOnInvalidRow(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	// A nullable aggregate_id, as found in hand-made outbox tables.
	if _, err := conn.Exec(ctx, `CREATE TABLE outbox (id bigserial PRIMARY KEY, aggregate_type text, aggregate_id text, event_type text, payload jsonb, headers jsonb)`); err != nil {
		t.Fatal(err)
	}
	slotCfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, slotCfg); err != nil {
		t.Fatal(err)
	}
	slot, err := slotctl.EnsureSlot(ctx, conn, slotCfg)
	if err != nil {
		t.Fatal(err)
	}
	var beforeBad pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&beforeBad); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', NULL, 'created', '{}')`); err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: cluster.ListenAddrs()}, testLogger(t), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	rt, _ := router.New(router.Config{})
	relay, err := pipeline.New(pipeline.Config{ConnString: srv.DSN("postgres"), Slot: "walbox", Publication: "walbox"}, kcl, rt, prometheus.NewRegistry(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	err = relay.Run(ctx, pglogrepl.LSN(slot.ConfirmedFlushLSN))
	if err == nil {
		t.Fatal("relay accepted a row with a NULL aggregate_id")
	}
	for _, want := range []string{"aggregate_id", "lsn"} {
		if !strings.Contains(strings.ToLower(err.Error()), want) {
			t.Errorf("error %q does not name %q", err, want)
		}
	}
	var confirmed pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if confirmed > beforeBad {
		t.Fatalf("slot confirmed %s, past the invalid row's transaction (which starts after %s)", confirmed, beforeBad)
	}
}

// TestRelayResumesAfterPostgresCrash: Postgres dies mid-stream (immediate
// shutdown, a crash) and comes back; the relay reconnects by itself, resumes
// from what Kafka acknowledged, and the dedup window keeps it from
// producing again what Kafka already has.
func TestRelayResumesAfterPostgresCrash(t *testing.T) {
	parallel(t)
	e := startEnv(t, 200*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	gen := outboxtest.NewGenerator(5, 30)
	var written []outboxtest.Event
	write := func(txns, size int) {
		for i := 0; i < txns; i++ {
			evs := gen.Batch(size)
			if err := outboxtest.WriteTx(ctx, e.conn, evs); err != nil {
				t.Fatal(err)
			}
			written = append(written, evs...)
		}
	}
	write(20, 500)
	var got []outboxtest.Received
	for outboxtest.DistinctIDs(got) < 1000 { // crash mid-stream
		recs, err := consumer.Poll(ctx)
		if err != nil || ctx.Err() != nil {
			t.Fatalf("consume before crash: %v %v", err, ctx.Err())
		}
		got = append(got, recs...)
	}
	if err := e.srv.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	e.conn.Close(ctx)
	if e.conn, err = pgx.Connect(ctx, e.srv.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	write(50, 20)
	rest, err := consumer.ReadUntil(ctx, func(r []outboxtest.Received) bool {
		return outboxtest.DistinctIDs(append(got, r...)) >= len(written)
	})
	got = append(got, rest...)
	if err != nil {
		t.Fatalf("consume after crash: %v (%v)", err, outboxtest.Check(written, got))
	}
	rep := outboxtest.Check(written, got)
	t.Logf("after a Postgres crash: %v", rep)
	if !rep.OK() || rep.Delivered != len(written) {
		t.Fatalf("delivery after a Postgres crash: %v", rep)
	}
	if rep.Duplicates != 0 {
		t.Fatalf("%d events produced twice although Kafka had acknowledged them before the reconnect", rep.Duplicates)
	}
	if !e.relay.Streaming() {
		t.Fatal("relay is not streaming after the restart")
	}
}

// TestRelayRoutesOutboxMessages: events emitted with
// pg_logical_emit_message in the business transaction (no outbox row at all)
// are routed like rows, in commit order with the rows, and the slot is
// confirmed past them.
func TestRelayRoutesOutboxMessages(t *testing.T) {
	parallel(t)
	e := startEnvWith(t, 200*time.Millisecond, func(c *pipeline.Config) { c.MessagePrefix = "outbox" })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gen := outboxtest.NewGenerator(9, 5)
	var (
		written []outboxtest.Event
		end     pglogrepl.LSN
	)
	for i := 0; i < 50; i++ {
		evs := gen.Batch(2)
		tx, err := e.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// One event as a row, the next as a message, in one transaction.
		r := evs[0]
		h, _ := json.Marshal(r.Headers)
		if _, err := tx.Exec(ctx, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)`,
			r.ID, r.AggregateType, r.AggregateID, r.EventType, string(r.Payload), string(h)); err != nil {
			t.Fatal(err)
		}
		m := evs[1]
		content, _ := json.Marshal(map[string]any{
			"id": m.ID, "aggregate_type": m.AggregateType, "aggregate_id": m.AggregateID,
			"event_type": m.EventType, "payload": json.RawMessage(m.Payload), "headers": m.Headers,
		})
		if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outbox', $1::text)`, string(content)); err != nil {
			t.Fatal(err)
		}
		// An unrelated prefix belongs to someone else and is ignored.
		if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'other', 'x')`); err != nil {
			t.Fatal(err)
		}
		// Inside the transaction, so below its commit's end.
		if err := tx.QueryRow(ctx, `SELECT pg_current_wal_insert_lsn()`).Scan(&end); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		written = append(written, evs...)
	}
	consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return outboxtest.DistinctIDs(got) >= len(written) })
	if err != nil {
		t.Fatalf("consume: %v (%v)", err, outboxtest.Check(written, got))
	}
	rep := outboxtest.Check(written, got)
	if !rep.OK() || rep.Delivered != len(written) || rep.Duplicates != 0 {
		t.Fatalf("rows and messages: %v", rep)
	}
	waitFor(t, 10*time.Second, "the slot to be confirmed past the last transaction", func() bool {
		return e.confirmedFlush(t) > end
	})
}
