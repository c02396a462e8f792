package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/router"
)

const eosTopic = "outbox.event.order"

// eosCluster starts an in-process Kafka with the outbox topic.
func eosCluster(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, eosTopic, "dlq"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// eosLoop is a relay in exactly-once mode with a transactional client on c,
// driven without a replication connection like testLoop.
type eosLoop struct {
	*loop
	relay *Relay
	eos   *eosState
	cl    *kgo.Client
	reg   *prometheus.Registry
	log   *logbuf.Buffer
}

func newEOSLoop(t *testing.T, c *kfake.Cluster, cfg Config, start pglogrepl.LSN) *eosLoop {
	t.Helper()
	cfg.ConnString, cfg.Slot, cfg.Publication = "postgres://127.0.0.1:1/none", "walbox", "walbox"
	cfg.Delivery = DeliveryExactlyOnce
	kc := KafkaConfig{Brokers: c.ListenAddrs(), TransactionalID: TransactionalIDFor("walbox"), TransactionTimeout: cfg.TransactionTimeout}
	lb := &logbuf.Buffer{}
	log := slog.New(slog.NewTextHandler(lb, nil))
	cl, err := NewKafkaClient(kc, log, nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg.NewTxnProducer = func() (TxnProducer, error) { return NewKafkaClient(kc, log, nil) }
	cfg.State = NewKafkaState(KafkaConfig{Brokers: c.ListenAddrs()}, "walbox.state")
	rt, err := router.New(router.Config{DeadLetterTopic: cfg.DeadLetterTopic, InvalidRows: invalidRows(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	r, err := New(cfg, cl, rt, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	r.tracker = checkpoint.New(start)
	e := r.delivery.(*eosState)
	e.safe = start
	e.server = testServer
	el := &eosLoop{relay: r, eos: e, cl: cl, reg: reg, log: lb}
	// The relay closes the clients it replaces; the last is the caller's.
	t.Cleanup(func() { el.eos.txp.(*kgo.Client).Close() })
	if err := el.newSession(t); err != nil {
		t.Fatal(err)
	}
	return el
}

// testServer is the history the unit tests' relays stream from.
var testServer = serverHistory{
	History: History{SystemID: "7000000000000000001", Timeline: 1, Database: "postgres", Slot: "walbox"},
	WALEnd:  0xFFFFFFFF,
}

// newSession starts a session as session() does: tracker reset to what
// Kafka committed, producer id loaded, position read.
func (el *eosLoop) newSession(t *testing.T) error {
	t.Helper()
	r := el.relay
	r.dec.Reset()
	r.tracker = checkpoint.New(el.eos.safe)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var err error
	r.producer, err = el.eos.startSession(ctx, r.producer, el.eos.server, nil)
	el.cl = el.eos.txp.(*kgo.Client)
	if err != nil {
		return err
	}
	l := newLoop(r, nil, context.Background(), r.cfg.ReceiveTimeout, 0)
	el.loop = l
	return nil
}

func (el *eosLoop) wal(t *testing.T, data []byte) {
	t.Helper()
	if err := el.handleWAL(0, data); err != nil {
		t.Fatalf("handleWAL(%q): %v", data[0], err)
	}
}

// txn feeds one Postgres transaction committing at commit with rows
// payloads, then lets the loop commit what is due.
func (el *eosLoop) txn(t *testing.T, commit pglogrepl.LSN, payloads ...string) error {
	t.Helper()
	el.wal(t, pgRelation(outboxRel, "public", "outbox"))
	el.wal(t, pgBegin(commit, uint32(commit)))
	for _, p := range payloads {
		el.wal(t, pgInsert(outboxRel, "id-"+p, "a", fmt.Sprintf(`{"n":%q}`, p)))
	}
	el.wal(t, pgCommit(commit))
	return el.tick(t)
}

// txnFlushed is txn with the rows' produce requests sent before the
// commit, so that they do not share a request with the state record.
func (el *eosLoop) txnFlushed(t *testing.T, commit pglogrepl.LSN, payloads ...string) error {
	t.Helper()
	el.wal(t, pgRelation(outboxRel, "public", "outbox"))
	el.wal(t, pgBegin(commit, uint32(commit)))
	for _, p := range payloads {
		el.wal(t, pgInsert(outboxRel, "id-"+p, "a", fmt.Sprintf(`{"n":%q}`, p)))
	}
	if err := el.cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	el.wal(t, pgCommit(commit))
	return el.tick(t)
}

func (el *eosLoop) tick(t *testing.T) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := el.eos.tick(ctx); err != nil {
		return err
	}
	return el.eos.waitCommit(ctx) // the commit runs in a goroutine
}

// finish commits what is open, as a clean stop does.
func (el *eosLoop) finish(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	el.drain(ctx)
	el.eos.finish(ctx)
}

// readCommitted returns the payloads a read_committed consumer sees on
// topics, reading to each partition's last stable offset.
func readCommitted(t *testing.T, c *kfake.Cluster, topics ...string) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ConsumeTopics(topics...),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var out []string
	// Poll until a poll with a deadline returns nothing more: the topics
	// are quiet, every transaction of the test has ended.
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		fs := cl.PollFetches(ctx)
		cancel()
		n := 0
		fs.EachRecord(func(r *kgo.Record) {
			n++
			if r.Topic == "dlq" {
				out = append(out, "dlq:"+header(r, "event_id"))
				return
			}
			out = append(out, strings.Trim(strings.TrimPrefix(string(r.Value), `{"n":`), `"}`))
		})
		if n == 0 {
			return out
		}
	}
}

func TestEOSBatchesWholePostgresTransactions(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 3, TransactionMaxInterval: time.Hour}, 1)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(el.txn(t, 0x1000, "a1", "a2")) // 2 records: below the bound, stays open
	if n := testutil.ToFloat64(el.eos.m.committed); n != 0 {
		t.Fatalf("committed %v transactions after 2 records, want 0", n)
	}
	if got := el.eos.confirmable(el.tracker.Confirmed()); got != 1 {
		t.Fatalf("confirmable %s with the kafka transaction open, want the start 0/1", got)
	}
	must(el.txn(t, 0x2000, "b1", "b2")) // 4 >= 3: committed at this boundary
	if n := testutil.ToFloat64(el.eos.m.committed); n != 1 {
		t.Fatalf("committed %v transactions, want 1", n)
	}
	if got, want := el.eos.safe, pglogrepl.LSN(0x2010); got != want {
		t.Fatalf("safe position %s after the commit, want the end of B %s", got, want)
	}
	// A Postgres transaction larger than the bound is one Kafka
	// transaction of its own, not split.
	must(el.txn(t, 0x3000, "c1", "c2", "c3", "c4", "c5"))
	if n := testutil.ToFloat64(el.eos.m.committed); n != 2 {
		t.Fatalf("committed %v transactions, want 2", n)
	}
	must(el.txn(t, 0x4000, "d1"))
	el.finish(t) // a clean stop commits the open one
	if n := testutil.ToFloat64(el.eos.m.committed); n != 3 {
		t.Fatalf("committed %v transactions, want 3", n)
	}
	got := readCommitted(t, c, eosTopic)
	want := "a1 a2 b1 b2 c1 c2 c3 c4 c5 d1"
	if strings.Join(got, " ") != want {
		t.Fatalf("read_committed saw %v, want %s", got, want)
	}
	pos, err := el.eos.state.Last(context.Background(), TransactionalIDFor("walbox"))
	if err != nil {
		t.Fatal(err)
	}
	if pos != (StatePosition{CommitLSN: 0x4000, EndLSN: 0x4010, History: testServer.History}) {
		t.Fatalf("state position %+v, want commit 0/4000 end 0/4010", pos)
	}
	hist := testutil.CollectAndCount(el.reg, "walbox_kafka_transaction_records")
	if hist != 1 {
		t.Fatalf("records histogram series = %d", hist)
	}
}

// TestEOSSkipsWhatKafkaCommittedOnRestart: the slot's confirmed position
// lags (a crash between commit and confirm); the next instance skips what
// the state topic shows committed.
func TestEOSSkipsWhatKafkaCommittedOnRestart(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1, TransactionMaxInterval: time.Hour}
	first := newEOSLoop(t, c, cfg, 1)
	if err := first.txn(t, 0x1000, "a1", "a2"); err != nil {
		t.Fatal(err)
	}
	if err := first.txn(t, 0x2000, "b1"); err != nil {
		t.Fatal(err)
	}
	// The first instance dies here, the slot never confirmed: the next
	// starts from 0/1 and the server sends A and B again.
	second := newEOSLoop(t, c, cfg, 1)
	for _, tx := range []struct {
		commit pglogrepl.LSN
		rows   []string
	}{{0x1000, []string{"a1", "a2"}}, {0x2000, []string{"b1"}}, {0x3000, []string{"c1"}}} {
		if err := second.txn(t, tx.commit, tx.rows...); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(second.eos.m.skipped); n != 2 {
		t.Fatalf("skipped %v transactions, want 2 (A and B)", n)
	}
	if got := second.eos.safe; got != 0x3010 {
		t.Fatalf("safe %s, want 0/3010", got)
	}
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1 a2 b1 c1" {
		t.Fatalf("read_committed saw %q, want each row once: a1 a2 b1 c1", got)
	}
	if !strings.Contains(second.log.String(), "skipped every transaction committed in Kafka before this session") {
		t.Fatalf("no log of the skips:\n%s", second.log.String())
	}
}

// TestEOSAbortLeavesNothingVisible: a produce error aborts the open Kafka
// transaction; read_committed sees none of it, the slot is not confirmed
// past it, and the next session produces it again.
func TestEOSAbortLeavesNothingVisible(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 3, TransactionMaxInterval: time.Hour}, 1)
	if err := el.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	el.finish(t)
	// B's records are acknowledged, then C's produce request fails for
	// good (not retriable), which spoils the transaction holding B.
	if err := el.txn(t, 0x2000, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := el.cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition = rp.Partition
				sp.ErrorCode = kerr.PolicyViolation.Code // not retriable, not the record's fault
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	el.wal(t, pgBegin(0x3000, 3))
	el.wal(t, pgInsert(outboxRel, "id-c1", "a", `{"n":"c1"}`))
	el.wal(t, pgCommit(0x3000))
	if err := el.cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	err := el.tick(t)
	if !isTxnAborted(err) {
		t.Fatalf("tick after the refusal: %v, want a transaction abort", err)
	}
	if n := testutil.ToFloat64(el.eos.m.aborted); n != 1 {
		t.Fatalf("aborted %v, want 1", n)
	}
	if got := el.eos.confirmable(el.tracker.Confirmed()); got != 0x1010 {
		t.Fatalf("confirmable after the abort %s, want the end of A 0/1010 (B's acks belong to the aborted transaction)", got)
	}
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1" {
		t.Fatalf("read_committed saw %q after the abort, want only a1", got)
	}
	// The restarted session receives B and C again and commits them.
	if err := el.newSession(t); err != nil {
		t.Fatal(err)
	}
	if err := el.txn(t, 0x2000, "b1"); err != nil {
		t.Fatal(err)
	}
	if err := el.txn(t, 0x3000, "c1"); err != nil {
		t.Fatal(err)
	}
	el.finish(t)
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1 b1 c1" {
		t.Fatalf("read_committed saw %q, want a1 b1 c1", got)
	}
}

// TestEOSRefusedRecordIsDeadLetteredOnRetry: a record Kafka refuses for
// what it is aborts the transaction; with a dead-letter topic the retry
// sends it there instead, so the retry cannot loop.
func TestEOSRefusedRecordIsDeadLetteredOnRetry(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 1, TransactionMaxInterval: time.Hour, DeadLetterTopic: "dlq"}, 1)
	td, err := kadm.NewClient(el.cl).ListTopics(context.Background(), eosTopic)
	if err != nil {
		t.Fatal(err)
	}
	id := td[eosTopic].ID
	// Disarmed after the retry: a new session's fresh client sends b1 in
	// a request of its own, which must not be refused.
	var armed atomic.Bool
	armed.Store(true)
	refuse := func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		if !armed.Load() || len(req.Topics) != 1 || (req.Topics[0].Topic != eosTopic && req.Topics[0].TopicID != id) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		st := kmsg.NewProduceResponseTopic()
		st.Topic, st.TopicID = req.Topics[0].Topic, req.Topics[0].TopicID
		sp := kmsg.NewProduceResponseTopicPartition()
		sp.ErrorCode = kerr.InvalidRecord.Code
		st.Partitions = append(st.Partitions, sp)
		resp.Topics = append(resp.Topics, st)
		return resp, nil, true
	}
	c.ControlKey(int16(kmsg.Produce), refuse)
	err = el.txnFlushed(t, 0x1000, "a1")
	if !isTxnAborted(err) {
		t.Fatalf("commit of the refused record: %v, want an abort", err)
	}
	if err := el.newSession(t); err != nil {
		t.Fatal(err)
	}
	c.ControlKey(int16(kmsg.Produce), refuse) // it would refuse it again
	if err := el.txnFlushed(t, 0x1000, "a1"); err != nil {
		t.Fatalf("retry: %v", err)
	}
	armed.Store(false)
	if err := el.txn(t, 0x2000, "b1"); err != nil {
		t.Fatalf("after the retry: %v", err)
	}
	got := strings.Join(readCommitted(t, c, eosTopic, "dlq"), " ")
	if got != "dlq:id-a1 b1" && got != "b1 dlq:id-a1" {
		t.Fatalf("read_committed saw %q, want a1 dead-lettered and b1", got)
	}
}

// TestEOSFencedInstanceStopsAndNeverConfirms: a second instance with the
// same transactional id fences the first; the first's commit fails, it
// stops with an error naming the id, and it confirms nothing afterwards.
func TestEOSFencedInstanceStopsAndNeverConfirms(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour}
	first := newEOSLoop(t, c, cfg, 1)
	if err := first.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	_ = newEOSLoop(t, c, cfg, 1) // loads the producer id: fences the first
	first.eos.full = true
	err := first.tick(t)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("commit of the fenced instance: %v, want ErrFenced", err)
	}
	if !strings.Contains(err.Error(), `"walbox-walbox"`) {
		t.Fatalf("error does not name the transactional id: %v", err)
	}
	if !errors.Is(first.relay.failureErr(), ErrFenced) {
		t.Fatalf("relay failure = %v, want ErrFenced", first.relay.failureErr())
	}
	if !first.eos.fenced.Load() || first.eos.safe != 1 {
		t.Fatalf("fenced %v safe %s, want fenced and nothing confirmed past 0/1", first.eos.fenced.Load(), first.eos.safe)
	}
	// sendStatus must not send anything now (it would panic on the nil
	// connection if it tried).
	if err := first.sendStatus(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "" {
		t.Fatalf("read_committed saw %q from the fenced instance, want nothing", got)
	}
}

// TestEOSQueuesWhileCommitting: while a commit runs (frozen here at the
// "produced" phase), the loop goes on routing; the records wait in the queue
// and go into the next transaction once the commit returned, in order, and
// the slot is confirmed only to what the first commit covered.
func TestEOSQueuesWhileCommitting(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	release := make(chan struct{})
	frozen := make(chan struct{}, 1)
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 2, TransactionMaxInterval: time.Hour, TxnPhase: func(p string) {
		if p == PhaseProduced {
			frozen <- struct{}{}
			<-release
		}
	}}, 1)
	ctx := context.Background()
	el.wal(t, pgRelation(outboxRel, "public", "outbox"))
	el.wal(t, pgBegin(0x1000, 1))
	el.wal(t, pgInsert(outboxRel, "id-a1", "a", `{"n":"a1"}`))
	el.wal(t, pgInsert(outboxRel, "id-a2", "a", `{"n":"a2"}`))
	el.wal(t, pgCommit(0x1000))
	if err := el.eos.tick(ctx); err != nil { // starts the commit of A
		t.Fatal(err)
	}
	<-frozen
	el.wal(t, pgBegin(0x2000, 2))
	el.wal(t, pgInsert(outboxRel, "id-b1", "a", `{"n":"b1"}`))
	el.wal(t, pgCommit(0x2000))
	if err := el.eos.tick(ctx); err != nil { // the commit still runs
		t.Fatal(err)
	}
	if n := len(el.eos.queue); n != 1 {
		t.Fatalf("%d records queued while committing, want 1", n)
	}
	if got := el.eos.confirmable(el.tracker.Confirmed()); got != 1 {
		t.Fatalf("confirmable %s while A commits, want 0/1", got)
	}
	close(release)
	if err := el.eos.waitCommit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := el.eos.confirmable(el.tracker.Confirmed()); got != 0x1010 {
		t.Fatalf("confirmable %s after A committed with B open, want the end of A 0/1010", got)
	}
	if len(el.eos.queue) != 0 || !el.eos.begun {
		t.Fatalf("queue %d, begun %v after the commit: want the queue produced into a new transaction", len(el.eos.queue), el.eos.begun)
	}
	el.finish(t)
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1 a2 b1" {
		t.Fatalf("read_committed saw %q, want a1 a2 b1", got)
	}
	if n := testutil.ToFloat64(el.eos.m.committed); n != 2 {
		t.Fatalf("committed %v, want 2", n)
	}
}

// TestKafkaStateLastReadsBackwards: the last position of a key is found
// whether it is among the last records or far behind other keys' records,
// and aborted records are not positions.
func TestKafkaStateLastReadsBackwards(t *testing.T) {
	c := eosCluster(t)
	ctx := context.Background()
	kc := KafkaConfig{Brokers: c.ListenAddrs()}
	st := NewKafkaState(kc, "walbox.state")
	if err := st.Ensure(ctx, slog.New(slog.DiscardHandler)); err != nil {
		t.Fatal(err)
	}
	if err := st.Ensure(ctx, slog.New(slog.DiscardHandler)); err != nil { // exists now
		t.Fatalf("second Ensure: %v", err)
	}
	if pos, err := st.Last(ctx, "a"); err != nil || pos != (StatePosition{}) {
		t.Fatalf("Last on an empty topic = %+v, %v; want zero", pos, err)
	}
	kc.TransactionalID = "writer"
	cl, err := NewKafkaClient(kc, slog.New(slog.DiscardHandler), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	txn := func(commit bool, recs ...*kgo.Record) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		end := kgo.TryAbort
		if commit {
			end = kgo.TryCommit
		}
		if err := cl.EndTransaction(ctx, end); err != nil {
			t.Fatal(err)
		}
	}
	txn(true, stateRecord("walbox.state", "a", StatePosition{CommitLSN: 0x10, EndLSN: 0x18, History: History{Slot: "s"}}, 1))
	for i := range 1500 { // more than the first window, of another key
		txn(true, stateRecord("walbox.state", "b", StatePosition{CommitLSN: pglogrepl.LSN(0x100 + i), EndLSN: pglogrepl.LSN(0x108 + i), History: History{Slot: "s"}}, 1))
	}
	txn(false, stateRecord("walbox.state", "b", StatePosition{CommitLSN: 0x9000, EndLSN: 0x9008, History: History{Slot: "s"}}, 1))
	if pos, err := st.Last(ctx, "a"); err != nil || pos != (StatePosition{CommitLSN: 0x10, EndLSN: 0x18, History: History{Slot: "s"}}) {
		t.Fatalf("Last(a) = %+v, %v; want 0/10 0/18 from far back", pos, err)
	}
	if pos, err := st.Last(ctx, "b"); err != nil || pos.CommitLSN != 0x100+1499 {
		t.Fatalf("Last(b) = %+v, %v; want the last committed, not the aborted one", pos, err)
	}
}

// TestEOSLostConnectionAbortsTheOpenTransaction: the replication connection
// drops with a Kafka transaction open (what if the process dies here: the
// same, the successor's producer id load aborts it). Nothing of it becomes
// visible; the next session produces it again, once.
func TestEOSLostConnectionAbortsTheOpenTransaction(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 100, TransactionMaxInterval: time.Hour}, 1)
	if err := el.txn(t, 0x1000, "a1", "a2"); err != nil {
		t.Fatal(err)
	}
	el.wal(t, pgBegin(0x2000, 2))
	el.wal(t, pgInsert(outboxRel, "id-b1", "a", `{"n":"b1"}`)) // B is cut off
	el.eos.endSession(context.Background())
	if n := testutil.ToFloat64(el.eos.m.aborted); n != 1 {
		t.Fatalf("aborted %v, want 1", n)
	}
	if got := readCommitted(t, c, eosTopic); len(got) != 0 {
		t.Fatalf("read_committed saw %v of the aborted transaction", got)
	}
	if err := el.newSession(t); err != nil {
		t.Fatal(err)
	}
	if el.tracker.Confirmed() != 1 {
		t.Fatalf("new session starts at %s, want 0/1", el.tracker.Confirmed())
	}
	if err := el.txn(t, 0x1000, "a1", "a2"); err != nil {
		t.Fatal(err)
	}
	if err := el.txn(t, 0x2000, "b1"); err != nil {
		t.Fatal(err)
	}
	el.finish(t)
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1 a2 b1" {
		t.Fatalf("read_committed saw %q, want a1 a2 b1", got)
	}
}

// TestEOSDeadLetteredMessageDoesNotCoverTheNextTransaction: a
// non-transactional outbox message is dead-lettered as a unit of its own
// whose position is the end of its WAL record, which can be exactly the
// commit LSN of the next transaction (seen on real Postgres: both
// 0/15055C0). Its Kafka transaction commits; the instance dies before the
// next transaction is committed. The restart must produce that transaction:
// it used to be skipped, as its commit LSN was "<=" the stored position.
func TestEOSDeadLetteredMessageDoesNotCoverTheNextTransaction(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1, TransactionMaxInterval: time.Hour, DeadLetterTopic: "dlq", MessagePrefix: "outbox"}
	first := newEOSLoop(t, c, cfg, 1)
	first.wal(t, pgMessage(false, 0x1000, "outbox", "not an event"))
	if err := first.tick(t); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(first.eos.m.committed); n != 1 {
		t.Fatalf("committed %v kafka transactions for the dead-lettered message, want 1", n)
	}
	// The transaction whose commit record starts where the message's
	// record ends; its Kafka transaction never commits (the instance dies).
	second := newEOSLoop(t, c, cfg, 1)
	if err := second.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	second.finish(t)
	if n := testutil.ToFloat64(second.eos.m.skipped); n != 0 {
		t.Fatalf("skipped %v transactions, want 0: the stored position is the message's, not the transaction's", n)
	}
	got := readCommitted(t, c, eosTopic)
	if strings.Join(got, " ") != "a1" {
		t.Fatalf("read_committed saw %v on %s, want a1", got, eosTopic)
	}
}

// TestEOSRegainedSlotLoadsAFreshProducerID: in standby mode the slot goes
// from A to B and back. B's producer id load fenced A; when A streams
// again its next session must load the producer id afresh, which fences B
// and aborts the transaction B left open. It used to keep the cached epoch:
// A's first commit failed "fenced" and B's open transaction blocked
// read_committed consumers until the transaction timeout.
func TestEOSRegainedSlotLoadsAFreshProducerID(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1, TransactionMaxInterval: time.Hour}
	a := newEOSLoop(t, c, cfg, 1)
	if err := a.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	// B takes the slot over, commits one transaction and dies with the
	// next one open (its record is in the log, uncommitted).
	b := newEOSLoop(t, c, cfg, 0x1010)
	if err := b.txn(t, 0x2000, "b1"); err != nil {
		t.Fatal(err)
	}
	b.wal(t, pgBegin(0x3000, 0x3000))
	b.wal(t, pgInsert(outboxRel, "id-x1", "a", `{"n":"x1"}`))
	if err := b.cl.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A regains the slot: the server sends from A's confirmed position.
	if err := a.newSession(t); err != nil {
		t.Fatal(err)
	}
	for _, tx := range []struct {
		commit pglogrepl.LSN
		row    string
	}{{0x2000, "b1"}, {0x3000, "c1"}} {
		if err := a.txn(t, tx.commit, tx.row); err != nil {
			t.Fatalf("A after regaining the slot, transaction %s: %v", tx.commit, err)
		}
	}
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1 b1 c1" {
		t.Fatalf("read_committed saw %q, want a1 b1 c1 (B's open transaction aborted)", got)
	}
}

// TestEOSFencedErrorIsNotDoubled: the promise of the state record and the
// failed commit both see the fence; the error used to carry the advice
// twice, one FencedError wrapped in another.
func TestEOSFencedErrorIsNotDoubled(t *testing.T) {
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour}
	first := newEOSLoop(t, c, cfg, 1)
	if err := first.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	_ = newEOSLoop(t, c, cfg, 1) // fences the first
	first.eos.full = true
	err := first.tick(t)
	if !errors.Is(err, ErrFenced) {
		t.Fatalf("commit of the fenced instance: %v, want ErrFenced", err)
	}
	if n := strings.Count(err.Error(), ErrFenced.Error()); n != 1 {
		t.Fatalf("the error names %q %d times, want once: %v", ErrFenced, n, err)
	}
}

// TestEOSOwnPositionIsNotHiddenByAnotherInstancesOpenTransaction: two
// walboxes share the default state topic. While B's Kafka transaction is
// open, A commits two transactions; the records are past B's open one, so
// a read_committed read up to the last stable offset did not see them, and
// A's next session (or its successor after a restart) read an older
// position of its own and produced A and B's rows again.
func TestEOSOwnPositionIsNotHiddenByAnotherInstancesOpenTransaction(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1, TransactionMaxInterval: time.Hour}
	a := newEOSLoop(t, c, cfg, 1) // creates the state topic
	other, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("walbox-other"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := other.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rec := stateRecord("walbox.state", "walbox-other", StatePosition{CommitLSN: 0x50, EndLSN: 0x60, History: History{Slot: "other"}}, 1)
	if err := other.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	for _, tx := range []struct {
		commit pglogrepl.LSN
		row    string
	}{{0x1000, "a1"}, {0x2000, "b1"}} {
		if err := a.txn(t, tx.commit, tx.row); err != nil {
			t.Fatal(err)
		}
	}
	replay := func(el *eosLoop) {
		t.Helper()
		for _, tx := range []struct {
			commit pglogrepl.LSN
			row    string
		}{{0x1000, "a1"}, {0x2000, "b1"}} {
			if err := el.txn(t, tx.commit, tx.row); err != nil {
				t.Fatal(err)
			}
		}
		if n := testutil.ToFloat64(el.eos.m.skipped); n != 2 {
			t.Errorf("skipped %v transactions, want the 2 this instance committed", n)
		}
	}
	t.Run("the same process, next session", func(t *testing.T) {
		if err := a.newSession(t); err != nil {
			t.Fatal(err)
		}
		replay(a)
	})
	t.Run("a restarted process", func(t *testing.T) {
		replay(newEOSLoop(t, c, cfg, 1))
	})
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1 b1" {
		t.Fatalf("read_committed saw %q, want a1 b1 once each", got)
	}
}

// TestEOSTransactionTimeoutRestartsTheSession: a Kafka transaction stays
// open longer than the transaction timeout (a Kafka stall, a slow large
// Postgres transaction) and the broker aborts it, bumping the epoch. walbox
// took that for fencing and stopped for good ("another producer ...
// started"); it must restart the session from the committed position and
// deliver the transaction then.
func TestEOSTransactionTimeoutRestartsTheSession(t *testing.T) {
	c := eosCluster(t)
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour, TransactionTimeout: 300 * time.Millisecond}, 1)
	if err := el.txnFlushed(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the broker aborts the open transaction
	el.eos.full = true
	err := el.tick(t)
	if errors.Is(err, ErrFenced) || !isTxnAborted(err) {
		t.Fatalf("commit of the timed-out transaction: %v, want a session restart, not ErrFenced", err)
	}
	if ferr := el.relay.failureErr(); ferr != nil {
		t.Fatalf("relay failed: %v", ferr)
	}
	if !strings.Contains(err.Error(), "--transaction-timeout") || !strings.Contains(err.Error(), "300ms") {
		t.Errorf("the restart does not name the timeout and its option: %v", err)
	}
	if n := testutil.ToFloat64(el.eos.m.timeouts); n != 1 {
		t.Errorf("walbox_kafka_transaction_timeouts_total = %v, want 1", n)
	}
	if err := el.newSession(t); err != nil {
		t.Fatal(err)
	}
	if err := el.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	el.finish(t)
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1" {
		t.Fatalf("read_committed saw %q, want a1", got)
	}
}

// TestCheckTransactionTimeout: a timeout above the brokers'
// transaction.max.timeout.ms is refused at start, naming both.
func TestCheckTransactionTimeout(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.BrokerConfigs(map[string]string{"transaction.max.timeout.ms": "120000"}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	kc := KafkaConfig{Brokers: c.ListenAddrs()}
	ctx := context.Background()
	for _, tt := range []struct {
		timeout time.Duration
		wantErr bool
	}{{0, false}, {2 * time.Minute, false}, {5 * time.Minute, true}} {
		err := CheckTransactionTimeout(ctx, kc, tt.timeout)
		if tt.wantErr != (err != nil) {
			t.Errorf("CheckTransactionTimeout(%s) = %v, want error %v", tt.timeout, err, tt.wantErr)
		}
		if tt.wantErr && (!errors.Is(err, ErrTransactionTimeout) || !strings.Contains(err.Error(), "2m0s") || !strings.Contains(err.Error(), "5m0s")) {
			t.Errorf("error %v does not name both timeouts", err)
		}
	}
}

// TestEOSSkippedNonTransactionalMessageIsCounted: a dead-lettered
// non-transactional message the state topic shows committed is skipped on
// the replay; it used to be skipped silently, with no metric or log.
func TestEOSSkippedNonTransactionalMessageIsCounted(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1, TransactionMaxInterval: time.Hour, DeadLetterTopic: "dlq", MessagePrefix: "outbox"}
	first := newEOSLoop(t, c, cfg, 1)
	first.wal(t, pgMessage(false, 0x1000, "outbox", "not an event"))
	if err := first.tick(t); err != nil {
		t.Fatal(err)
	}
	second := newEOSLoop(t, c, cfg, 1)
	second.wal(t, pgMessage(false, 0x1000, "outbox", "not an event"))
	if err := second.tick(t); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(second.eos.m.skipped); n != 1 {
		t.Fatalf("walbox_transactions_skipped_total = %v, want 1 for the message", n)
	}
	if got := readCommitted(t, c, "dlq"); len(got) != 1 {
		t.Fatalf("dead-letter topic holds %v, want the message once", got)
	}
}
