package pipeline_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// TestStandbyPollsWithoutAWalsender: a standby retrying every StandbyRetry
// used to open a walsender and be refused each time, two lines in the
// server log per retry (about 170,000 a day at the default second). It now
// checks pg_replication_slots.active first and opens a walsender only once
// the slot is free, then takes over.
func TestStandbyPollsWithoutAWalsender(t *testing.T) {
	parallel(t)
	e := startEnv(t, 200*time.Millisecond)
	waitFor(t, 30*time.Second, "the active relay to stream", e.relay.Streaming)

	kcl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(kcl.Close)
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.Standby, cfg.StandbyRetry = true, 50*time.Millisecond
	standby, err := pipeline.New(cfg, kcl, rt, prometheus.NewRegistry(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- standby.Run(ctx, e.confirmedFlush(t)) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("standby relay: %v", err)
		}
	})
	waitFor(t, 10*time.Second, "the second relay to stand by", standby.Standby)
	time.Sleep(time.Second) // some 20 retries

	b, err := os.ReadFile(e.srv.LogPath())
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "is active for PID"); n > 1 {
		t.Fatalf("the standby was refused %d times by a walsender in a second of retrying every 50ms; want at most the first", n)
	}

	e.cancel() // the active relay stops and frees the slot
	waitFor(t, 30*time.Second, "the standby to take over", standby.Streaming)
}

// TestLostSessionRecordsAreNotDeliveredLater: an instance cut off from
// both Postgres and Kafka used to keep its unacknowledged records and
// retry them without limit (no delivery timeout, an unbounded Flush before
// reconnecting): when Kafka came back they landed, after whatever the
// slot's new holder had sent meanwhile, and compacted topics regressed to
// an old state. Now what Kafka does not acknowledge within
// LostSessionFlushTimeout of the session's end is purged, and the slot's
// next holder (here the same instance, once the test's holder lets go of
// the slot) sends it again.
func TestLostSessionRecordsAreNotDeliveredLater(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	slot, err := slotctl.EnsureSlot(ctx, conn, scfg)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	// Kafka "unreachable": every produce request closes its connection.
	var kafkaDown atomic.Bool
	cluster.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		cluster.KeepControl()
		if kafkaDown.Load() {
			return nil, errors.New("test: kafka unreachable"), true
		}
		return nil, nil, false
	})

	log := testLogger(t)
	reg := prometheus.NewRegistry()
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: cluster.ListenAddrs(), MaxBufferedRecords: 2001}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	defer kcl.Close()
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	const bound = 2 * time.Second
	relay, err := pipeline.New(pipeline.Config{
		ConnString: srv.DSN("postgres"), Slot: "walbox", Publication: "walbox",
		StatusInterval: 200 * time.Millisecond, DedupWindow: 10000, MaxInflightRecords: 2000,
		Standby: true, StandbyRetry: 100 * time.Millisecond, LostSessionFlushTimeout: bound,
	}, kcl, rt, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx, pglogrepl.LSN(slot.ConfirmedFlushLSN)) }()
	defer func() {
		rcancel()
		if err := <-done; err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	waitFor(t, 30*time.Second, "the relay to stream", relay.Streaming)

	gen := outboxtest.NewGenerator(61, 10, "lost")
	before := gen.Batch(20)
	if err := outboxtest.WriteTx(ctx, conn, before); err != nil {
		t.Fatal(err)
	}
	consumer, err := outboxtest.NewConsumer(cluster.ListenAddrs(), `outbox\.event\.lost`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return len(got) >= len(before) })
	if err != nil {
		t.Fatalf("before the cut: %v", err)
	}

	// Kafka goes away; the relay produces the next transaction into its
	// buffer, then loses Postgres too, and another holder takes the slot.
	kafkaDown.Store(true)
	stale := gen.Batch(30)
	if err := outboxtest.WriteTx(ctx, conn, stale); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the relay to hand the cut-off transaction to the producer", func() bool {
		return metricValue(t, reg, "walbox_inflight_records") >= float64(len(stale))
	})
	cutAt := time.Now()
	killWalsender(t, conn, "walbox")
	holder := holdSlot(t, ctx, srv.DSN("postgres"), "walbox")
	// Not fatal yet: the old code never got here (it waited in Flush for
	// Kafka), and what it then delivered is the point.
	purged := false
	for deadline := time.Now().Add(2*bound + 20*time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if relay.Standby() && metricValue(t, reg, "walbox_inflight_records") == 0 {
			purged = true
			break
		}
	}
	t.Logf("purged %v, standing by %s after the cut (bound %s)", purged, time.Since(cutAt).Round(10*time.Millisecond), bound)

	// Kafka is back: nothing of the cut-off session may land now.
	kafkaDown.Store(false)
	pctx, pcancel := context.WithTimeout(ctx, 3*time.Second)
	late, _ := consumer.Poll(pctx)
	pcancel()
	if len(late) != 0 {
		t.Fatalf("%d records of the lost session were delivered after Kafka came back, %s after the session ended (bound %s)",
			len(late), time.Since(cutAt).Round(time.Second), bound)
	}
	if !purged {
		t.Fatalf("the relay still held its records and did not stand by %s after the cut (bound %s)", 2*bound+20*time.Second, bound)
	}

	// The slot's next holder sends them: here the relay itself, once the
	// holder lets go.
	holder.Close(context.Background())
	waitFor(t, 30*time.Second, "the relay to take the slot back", relay.Streaming)
	written := append(before, stale...)
	again, err := consumer.ReadUntil(ctx, func(g []outboxtest.Received) bool {
		return outboxtest.DistinctIDs(append(got, g...)) >= len(written)
	})
	if err != nil {
		t.Fatalf("after the takeover: %v", err)
	}
	got = append(got, again...)
	rep := outboxtest.Check(written, got)
	if !rep.OK() {
		t.Fatalf("delivery after the takeover: %v", rep)
	}
}

// holdSlot streams slot from a replication connection of its own, as the
// slot's new holder (another instance) would.
func holdSlot(t *testing.T, ctx context.Context, dsn, slot string) *pgconn.PgConn {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["replication"] = "database"
	c, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	if err := pglogrepl.StartReplication(ctx, c, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walbox'"}}); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestFencedExactlyOnceInstanceStandsBy: in exactly-once mode a former
// active instance whose transactional id another instance took over
// (fenced) used to stop with ErrFenced, although the standby docs promise
// that a --standby instance waits for the slot. It now stands by: it keeps
// checking the slot while another process holds it, takes it back once it
// is free with a new producer, and delivers what it had not committed,
// once.
func TestFencedExactlyOnceInstanceStandsBy(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()

	const retry = 2 * time.Second
	a := startEOSRelay(t, conn, srv.DSN("postgres"), brokers, "walbox", "walbox.state", func(c *pipeline.Config) {
		c.Standby, c.StandbyRetry = true, retry
		c.TransactionMaxInterval = 50 * time.Millisecond
	})
	defer func() {
		if err := a.stop(t); err != nil {
			t.Errorf("relay: %v", err)
		}
	}()
	waitFor(t, 30*time.Second, "the relay to stream", a.relay.Streaming)
	gen := outboxtest.NewGenerator(62, 10, "fenced")
	first := gen.Batch(20)
	if err := outboxtest.WriteTx(ctx, conn, first); err != nil {
		t.Fatal(err)
	}
	consumer, err := outboxtest.NewConsumer(brokers, `outbox\.event\.fenced`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got, err := consumer.ReadUntil(ctx, func(g []outboxtest.Received) bool { return len(g) >= len(first) })
	if err != nil {
		t.Fatalf("before the fence: %v", err)
	}

	// Another instance loads the producer id of the transactional id, as
	// the slot's new holder does: the next commit of this one is fenced.
	other, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(pipeline.TransactionalIDFor("walbox")))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, _, err := other.ProducerID(ctx); err != nil {
		t.Fatal(err)
	}
	second := gen.Batch(20)
	if err := outboxtest.WriteTx(ctx, conn, second); err != nil {
		t.Fatal(err)
	}
	standby := func() bool {
		select {
		case err := <-a.done:
			t.Fatalf("the fenced relay stopped instead of standing by: %v", err)
		default:
		}
		return a.relay.Standby()
	}
	waitFor(t, 30*time.Second, "the fenced relay to stand by", standby)
	// Another process holds the slot now; the relay keeps checking.
	var holder *pgconn.PgConn
	waitFor(t, 30*time.Second, "the test to take the free slot", func() bool {
		var active bool
		if err := conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&active); err != nil {
			t.Fatal(err)
		}
		if !active && !a.relay.Streaming() {
			holder = holdSlot(t, ctx, srv.DSN("postgres"), "walbox")
			return true
		}
		return false
	})
	until := time.Now().Add(2 * retry)
	for time.Now().Before(until) {
		if !standby() {
			t.Fatal("the relay left standby while another process held the slot")
		}
		time.Sleep(50 * time.Millisecond)
	}
	holder.Close(context.Background())
	waitFor(t, 30*time.Second, "the relay to take the slot back", a.relay.Streaming)
	written := append(first, second...)
	again, err := consumer.ReadUntil(ctx, func(g []outboxtest.Received) bool {
		return outboxtest.DistinctIDs(append(got, g...)) >= len(written)
	})
	if err != nil {
		t.Fatalf("after taking the slot back: %v", err)
	}
	got = append(got, again...)
	if rep := outboxtest.Check(written, got); !rep.OK() || rep.Duplicates != 0 {
		t.Fatalf("exactly-once delivery after the fence: %v", rep)
	}
}
