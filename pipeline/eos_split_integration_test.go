package pipeline_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/slotctl"
)

// TestRelayExactlyOnceSplitsAHugeTransaction: real Postgres, real broker.
// One Postgres transaction of 50,000 rows (1,000,000 in the full run;
// WALBOX_TEST_SPLIT_ROWS=5000000 runs the 5M-row case, about 3.5 minutes
// on 2 cores) is
// too large for one Kafka transaction, so walbox commits it in parts,
// recording the position inside it. The first instance dies (frozen,
// walsender terminated, fenced by its successor) right after its second
// part committed; the successor skips exactly the committed parts and
// produces the rest. A read_committed consumer sees every row once, in
// order per aggregate, and the rows of the small transactions before and
// after it.
func TestRelayExactlyOnceSplitsAHugeTransaction(t *testing.T) {
	parallel(t)
	rows := fulltest.Pick(50_000, 1_000_000)
	if s := os.Getenv("WALBOX_TEST_SPLIT_ROWS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 10 {
			t.Fatalf("WALBOX_TEST_SPLIT_ROWS=%q: want a number of rows, at least 10", s)
		}
		rows = n
	}
	split := rows / 5
	broker := kafkatest.Start(t)
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), fulltest.Pick(4*time.Minute, 40*time.Minute))
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	const slot = "eos_split"
	scfg := slotctl.Config{Table: "public.outbox", Slot: slot, Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	aggType := "split" + strconv.FormatInt(time.Now().UnixNano(), 36)
	insert := func(from, to int) {
		t.Helper()
		// One statement, one transaction; n numbers the rows in commit
		// order, 100 aggregates.
		if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload)
			SELECT $1, 'agg-' || (i % 100), 'big', jsonb_build_object('n', i) FROM generate_series($2::int, $3::int) i`,
			aggType, from, to); err != nil {
			t.Fatal(err)
		}
	}
	mutate := func(c *pipeline.Config) {
		c.TransactionSplitRecords = split
		c.TransactionMaxInterval = 200 * time.Millisecond
		c.TransactionTimeout = 5 * time.Minute
	}
	frozen, release := make(chan struct{}), make(chan struct{})
	commits := 0
	first := startEOSRelay(t, conn, srv.DSN("postgres"), broker.Addrs(), slot, "walbox.state.split", func(c *pipeline.Config) {
		mutate(c)
		c.TxnPhase = func(p string) {
			if p != pipeline.PhaseCommitted {
				return
			}
			// The first commit is the small transaction's, the next
			// two the huge one's first parts.
			if commits++; commits == 3 {
				close(frozen)
				<-release
			}
		}
	})
	insert(1, 10)
	waitFor(t, time.Minute, "the small transaction to commit", func() bool {
		return metricValue(t, first.reg, "walbox_kafka_transactions_total", "result", "committed") >= 1
	})
	began := time.Now()
	insert(11, 10+rows)
	t.Logf("inserted %d rows in one transaction in %s", rows, time.Since(began).Round(time.Millisecond))
	insert(11+rows, 20+rows)
	total := rows + 20
	select {
	case <-frozen:
	case err := <-first.done:
		t.Fatalf("first relay ended before its third commit: %v", err)
	case <-ctx.Done():
		t.Fatal("the first relay never committed the huge transaction's second part")
	}
	killWalsender(t, conn, slot)
	resumed := time.Now()
	second := startEOSRelay(t, conn, srv.DSN("postgres"), broker.Addrs(), slot, "walbox.state.split", mutate)

	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...), kgo.ConsumeTopics("outbox.event."+aggType),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := make([]uint8, total+1)
	distinct, duplicates, orderViolations := 0, 0, 0
	last := map[string]int{} // per aggregate (the key), the last n
	poll := func(pctx context.Context) {
		fs := cl.PollFetches(pctx)
		fs.EachError(func(topic string, p int32, err error) {
			if pctx.Err() == nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("fetch %s/%d: %v", topic, p, err)
			}
		})
		fs.EachRecord(func(r *kgo.Record) {
			var v struct{ N int }
			if err := json.Unmarshal(r.Value, &v); err != nil || v.N < 1 || v.N > total {
				t.Fatalf("record %s/%d@%d: value %q: %v", r.Topic, r.Partition, r.Offset, r.Value, err)
			}
			if seen[v.N]++; seen[v.N] == 1 {
				distinct++
			} else {
				duplicates++
			}
			k := string(r.Key)
			if v.N <= last[k] {
				orderViolations++
			}
			last[k] = v.N
		})
	}
	for distinct < total && ctx.Err() == nil {
		poll(ctx)
	}
	if distinct < total {
		t.Fatalf("delivered %d of %d rows", distinct, total)
	}
	t.Logf("every row delivered %s after the second instance started", time.Since(resumed).Round(time.Millisecond))
	first.cancel()
	close(release)
	if ferr := <-first.done; ferr != nil && !errors.Is(ferr, pipeline.ErrFenced) {
		t.Logf("first instance ended with %v", ferr)
	}
	if err := second.stop(t); err != nil {
		t.Fatalf("second relay: %v", err)
	}
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	poll(pctx) // anything late comes now
	pcancel()
	splits := metricValue(t, second.reg, "walbox_kafka_transaction_splits_total")
	t.Logf("%d rows: %d delivered, %d duplicates, %d order violations; the second instance committed %v parts inside the huge transaction",
		total, distinct, duplicates, orderViolations, splits)
	if duplicates != 0 || orderViolations != 0 {
		t.Fatalf("exactly-once check failed: %d duplicates, %d order violations", duplicates, orderViolations)
	}
	if splits < 1 {
		t.Errorf("the second instance committed %v parts inside the huge transaction, want it split", splits)
	}
}

// TestRelayExactlyOnceSplitPositionSurvivesAMessagesChange: real Postgres,
// kfake. A split position counts the changes and transactional logical
// decoding messages of the Postgres transaction; the server sends those
// messages only when walbox asks for them (messages 'true'), which it did
// only with a message prefix or heartbeats. An instance with heartbeats on
// committed the first part of a transaction holding another tool's
// message; its successor, started without heartbeats, was sent the
// transaction without the message, so the recorded count named one change
// more of it than was committed and that outbox row was never produced.
// In exactly-once mode the messages are always asked for, so the stream a
// count refers to is the same whatever the options.
func TestRelayExactlyOnceSplitPositionSurvivesAMessagesChange(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	const slot = "eos_split_msgs"
	scfg := slotctl.Config{Table: "public.outbox", Slot: slot, Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	const aggType, rows = "splitmsg", 6
	mutate := func(c *pipeline.Config) {
		c.TransactionSplitRecords = 2
		c.TransactionMaxInterval = 100 * time.Millisecond
	}
	frozen, release := make(chan struct{}), make(chan struct{})
	var commits atomic.Int32
	first := startEOSRelay(t, conn, srv.DSN("postgres"), brokers, slot, "walbox.state", func(c *pipeline.Config) {
		mutate(c)
		c.Heartbeats = true
		c.TxnPhase = func(p string) {
			// The first commit is the first part: row 1, the message,
			// row 2 (3 changes).
			if p == pipeline.PhaseCommitted && commits.Add(1) == 1 {
				close(frozen)
				<-release
			}
		}
	})
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	insert := func(n int) {
		t.Helper()
		if _, err := tx.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'agg', 'e', jsonb_build_object('n', $2::int))`, aggType, n); err != nil {
			t.Fatal(err)
		}
	}
	insert(1)
	if _, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'another-tool', 'not walbox''s')`); err != nil {
		t.Fatal(err)
	}
	for n := 2; n <= rows; n++ {
		insert(n)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-frozen:
	case err := <-first.done:
		t.Fatalf("first relay ended before its first commit: %v", err)
	case <-ctx.Done():
		t.Fatal("the first relay never committed the first part")
	}
	killWalsender(t, conn, slot)
	second := startEOSRelay(t, conn, srv.DSN("postgres"), brokers, slot, "walbox.state", mutate)

	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("outbox.event."+aggType),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seen := map[int]int{}
	poll := func(pctx context.Context) {
		fs := cl.PollFetches(pctx)
		fs.EachRecord(func(r *kgo.Record) {
			var v struct{ N int }
			if err := json.Unmarshal(r.Value, &v); err != nil {
				t.Fatalf("record value %q: %v", r.Value, err)
			}
			seen[v.N]++
		})
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	for len(seen) < rows && wctx.Err() == nil {
		poll(wctx)
	}
	wcancel()
	pctx, pcancel := context.WithTimeout(ctx, time.Second)
	poll(pctx) // anything late comes now
	pcancel()
	close(release)
	released = true
	first.cancel()
	<-first.done
	if err := second.stop(t); err != nil {
		t.Fatalf("second relay: %v", err)
	}
	for n := 1; n <= rows; n++ {
		if seen[n] != 1 {
			t.Errorf("row %d delivered %d times in read_committed, want once (seen %v)", n, seen[n], seen)
		}
	}
}
