package pipeline

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walbox/walbox/heartbeat"
)

// rows feeds inserts of the Postgres transaction being received, letting
// the loop commit what is due after each, as the loop does between
// receives.
func (el *eosLoop) rows(t *testing.T, payloads ...string) {
	t.Helper()
	for _, p := range payloads {
		el.wal(t, pgInsert(outboxRel, "id-"+p, "a", fmt.Sprintf(`{"n":%q}`, p)))
		if err := el.tick(t); err != nil {
			t.Fatalf("tick after row %s: %v", p, err)
		}
	}
}

func seq(prefix string, from, to int) []string {
	var out []string
	for i := from; i <= to; i++ {
		out = append(out, fmt.Sprintf("%s%d", prefix, i))
	}
	return out
}

// TestEOSSplitsALargePostgresTransaction: a Postgres transaction of more
// records than TransactionSplitRecords is committed in several Kafka
// transactions, each recording how much of it is committed; when the
// instance dies (or only its session ends) between two of them, the
// restart skips exactly the committed prefix and produces the rest: a
// read_committed consumer sees every row once. The slot is never confirmed
// inside the split transaction. Before the split, a Postgres transaction
// was never committed before its end: nothing of it was visible until its
// Commit, and one that took longer than the transaction timeout to
// produce was aborted on every attempt.
func TestEOSSplitsALargePostgresTransaction(t *testing.T) {
	parallel(t)
	for _, restart := range []string{"process dies", "session ends"} {
		t.Run(restart, func(t *testing.T) {
			c := eosCluster(t)
			cfg := Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour, TransactionSplitRecords: 3}
			first := newEOSLoop(t, c, cfg, 1)
			if err := first.txn(t, 0x1000, "a1", "a2"); err != nil {
				t.Fatal(err)
			}
			first.finish(t)
			first.wal(t, pgBegin(0x2000, 2))
			first.rows(t, seq("p", 1, 8)...)
			// p1-p3 and p4-p6 are committed in two Kafka transactions;
			// p7 and p8 are in a third one, open.
			if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1 a2 p1 p2 p3 p4 p5 p6" {
				t.Fatalf("read_committed saw %q inside the split transaction, want a1 a2 p1 p2 p3 p4 p5 p6", got)
			}
			if n := testutil.ToFloat64(first.eos.m.splits); n != 2 {
				t.Fatalf("walbox_kafka_transaction_splits_total = %v, want 2", n)
			}
			if got, want := first.eos.lastCommitted, (StatePosition{CommitLSN: 0x1000, EndLSN: 0x1010,
				Split: SplitPosition{CommitLSN: 0x2000, Changes: 6}, History: testServer.History}); got != want {
				t.Fatalf("last committed %+v, want %+v", got, want)
			}
			if got := first.eos.confirmable(first.tracker.Confirmed()); got != 0x1010 {
				t.Fatalf("confirmable %s inside the split transaction, want the end of A 0/1010", got)
			}
			second := first
			if restart == "process dies" {
				// A new process from the slot's position: the server
				// sends A and P again; loading the producer id aborts
				// the first one's open transaction.
				second = newEOSLoop(t, c, cfg, 1)
			} else {
				first.eos.endSession(t.Context())
				if err := first.newSession(t); err != nil {
					t.Fatal(err)
				}
			}
			if err := second.txn(t, 0x1000, "a1", "a2"); err != nil {
				t.Fatal(err)
			}
			second.wal(t, pgBegin(0x2000, 2))
			second.rows(t, seq("p", 1, 10)...)
			second.wal(t, pgCommit(0x2000))
			if err := second.tick(t); err != nil {
				t.Fatal(err)
			}
			if err := second.txn(t, 0x3000, "q1"); err != nil {
				t.Fatal(err)
			}
			second.finish(t)
			want := "a1 a2 " + strings.Join(seq("p", 1, 10), " ") + " q1"
			if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != want {
				t.Fatalf("read_committed saw %q, want each row once: %q", got, want)
			}
			if got := second.eos.safe; got != 0x3010 {
				t.Fatalf("safe %s, want 0/3010", got)
			}
			if got := second.eos.lastCommitted.Split; !got.IsZero() {
				t.Fatalf("last committed position still inside a transaction: %+v", got)
			}
			if !strings.Contains(second.log.String(), "resuming inside a postgres transaction split across kafka transactions") {
				t.Errorf("no log of the resume inside the split transaction:\n%s", second.log.String())
			}
			if problems, err := testutil.GatherAndLint(second.reg); err != nil || len(problems) != 0 {
				t.Errorf("metrics lint: %v %v", problems, err)
			}
		})
	}
}

// TestEOSSplitsByAge: a Postgres transaction that takes longer than the
// transaction timeout to produce is committed in parts, each before half
// the timeout, so the broker never aborts one; every row is delivered once.
// It used to stay in one Kafka transaction, which the broker aborted for
// its age, on every attempt.
func TestEOSSplitsByAge(t *testing.T) {
	c := eosCluster(t)
	const timeout = time.Second
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour, TransactionTimeout: timeout}, 1)
	el.wal(t, pgRelation(outboxRel, "public", "outbox"))
	el.wal(t, pgBegin(0x2000, 2))
	// A slow producer: rows arrive over more than twice the timeout.
	var rows []string
	for start, i := time.Now(), 1; time.Since(start) < 2*timeout+timeout/2; i++ {
		p := fmt.Sprintf("p%d", i)
		rows = append(rows, p)
		el.rows(t, p)
		time.Sleep(20 * time.Millisecond)
	}
	el.wal(t, pgCommit(0x2000))
	if err := el.tick(t); err != nil {
		t.Fatalf("after the last row (%d rows): %v", len(rows), err)
	}
	el.finish(t)
	if n := testutil.ToFloat64(el.eos.m.timeouts); n != 0 {
		t.Fatalf("walbox_kafka_transaction_timeouts_total = %v, want 0", n)
	}
	if n := testutil.ToFloat64(el.eos.m.splits); n < 2 {
		t.Fatalf("walbox_kafka_transaction_splits_total = %v, want at least 2", n)
	}
	if got, want := strings.Join(readCommitted(t, c, eosTopic), " "), strings.Join(rows, " "); got != want {
		t.Fatalf("read_committed saw %q, want %q", got, want)
	}
	if got := el.eos.safe; got != 0x2010 {
		t.Fatalf("safe %s, want 0/2010", got)
	}
}

// TestEOSSplitKeepsDivertedKeysOfTheRest: a record Kafka refuses after a
// split aborts only the open part; the retry skips the committed prefix,
// dead-letters the refused record and produces the rest.
func TestEOSSplitKeepsDivertedKeysOfTheRest(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour, TransactionSplitRecords: 2, DeadLetterTopic: "dlq"}
	el := newEOSLoop(t, c, cfg, 1)
	el.wal(t, pgRelation(outboxRel, "public", "outbox"))
	el.wal(t, pgBegin(0x2000, 2))
	el.rows(t, "p1", "p2") // committed by a split
	// p3 is refused for what it is.
	c.ControlKey(int16(kmsg.Produce), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		req := kreq.(*kmsg.ProduceRequest)
		resp := req.ResponseKind().(*kmsg.ProduceResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewProduceResponseTopic()
			st.Topic, st.TopicID = rt.Topic, rt.TopicID
			for _, rp := range rt.Partitions {
				sp := kmsg.NewProduceResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.InvalidRecord.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	el.wal(t, pgInsert(outboxRel, "id-p3", "a", `{"n":"p3"}`))
	if err := el.cl.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := el.tick(t); !isTxnAborted(err) {
		t.Fatalf("refused record: %v, want the session restarted", err)
	}
	if err := el.newSession(t); err != nil {
		t.Fatal(err)
	}
	el.wal(t, pgRelation(outboxRel, "public", "outbox"))
	el.wal(t, pgBegin(0x2000, 2))
	el.rows(t, "p1", "p2", "p3", "p4")
	el.wal(t, pgCommit(0x2000))
	if err := el.tick(t); err != nil {
		t.Fatal(err)
	}
	el.finish(t)
	// Two topics: their records interleave in no defined order, so each
	// topic's own sequence is compared.
	var records, dead []string
	for _, r := range readCommitted(t, c, eosTopic, "dlq") {
		if strings.HasPrefix(r, "dlq:") {
			dead = append(dead, r)
		} else {
			records = append(records, r)
		}
	}
	if got, gotDead := strings.Join(records, " "), strings.Join(dead, " "); got != "p1 p2 p4" || gotDead != "dlq:id-p3" {
		t.Fatalf("read_committed saw %q and dead-lettered %q, want p1 p2 p4 once each and p3 dead-lettered", got, gotDead)
	}
}

// TestStateRecordSplitFormat: a split position survives the state record;
// a record without the split fields (an older walbox's) reads as a whole
// position; and what an older walbox reads of a split record is the last
// whole Postgres transaction (it produces the split one again: duplicates,
// nothing lost).
func TestStateRecordSplitFormat(t *testing.T) {
	p := StatePosition{CommitLSN: 0x1000, EndLSN: 0x1010, Split: SplitPosition{CommitLSN: 0x2000, Changes: 7}, History: testServer.History}
	b := encodeState(p, 3)
	got, err := decodeState(b)
	if err != nil || got != p {
		t.Fatalf("decodeState(encodeState(%+v)) = %+v, %v", p, got, err)
	}
	var old struct {
		CommitLSN string `json:"commit_lsn"`
		EndLSN    string `json:"end_lsn"`
	}
	if err := json.Unmarshal(b, &old); err != nil || old.CommitLSN != "0/1000" || old.EndLSN != "0/1010" {
		t.Fatalf("an older walbox reads %+v, %v from %s; want the last whole transaction 0/1000, 0/1010", old, err, b)
	}
	got, err = decodeState([]byte(`{"slot":"walbox","commit_lsn":"0/1000","end_lsn":"0/1010","records":1}`))
	if err != nil || !got.Split.IsZero() || got.EndLSN != 0x1010 {
		t.Fatalf("older record: %+v, %v", got, err)
	}
	if _, err := decodeState([]byte(`{"commit_lsn":"0/1000","end_lsn":"0/1010","split_commit_lsn":"0/1000","split_changes":1}`)); err == nil {
		t.Fatal("a split before the end of the whole position was accepted")
	}
	if !(StatePosition{EndLSN: 0x1010, Split: SplitPosition{CommitLSN: 0x2000, Changes: 2}}).after(StatePosition{EndLSN: 0x1010, Split: SplitPosition{CommitLSN: 0x2000, Changes: 1}}) ||
		!(StatePosition{EndLSN: 0x2010}).after(StatePosition{EndLSN: 0x1010, Split: SplitPosition{CommitLSN: 0x2000, Changes: 9}}) ||
		(StatePosition{EndLSN: 0x1010}).after(StatePosition{EndLSN: 0x1010, Split: SplitPosition{CommitLSN: 0x2000, Changes: 1}}) {
		t.Fatal("positions do not order by end, then split")
	}
}

// TestResumeSplit: a split position is trusted on its own history only,
// and on a newer timeline only if its transaction committed before the
// switch point.
func TestResumeSplit(t *testing.T) {
	h := testServer.History
	split := SplitPosition{CommitLSN: 0x2000, Changes: 5}
	tl2 := serverHistory{History: History{SystemID: h.SystemID, Timeline: 2, Database: h.Database, Slot: h.Slot}, WALEnd: 0xFFFFFF}
	tests := []struct {
		name      string
		pos       StatePosition
		srv       serverHistory
		want      SplitPosition
		wantWarn  bool
		wantError bool
	}{
		{name: "same history", pos: StatePosition{EndLSN: 0x1010, Split: split, History: h}, srv: testServer, want: split},
		{name: "first position is a split", pos: StatePosition{Split: split, History: h}, srv: testServer, want: split},
		{name: "another system", pos: StatePosition{Split: split, History: History{SystemID: "1", Timeline: 1, Database: h.Database, Slot: h.Slot}},
			srv: testServer, wantError: true},
		{name: "before the switch point", pos: StatePosition{EndLSN: 0x1010, Split: split, History: h},
			srv: func() serverHistory { s := tl2; s.Switches = map[int32]pglogrepl.LSN{1: 0x3000}; return s }(), want: split},
		{name: "at the switch point", pos: StatePosition{EndLSN: 0x1010, Split: split, History: h},
			srv: func() serverHistory { s := tl2; s.Switches = map[int32]pglogrepl.LSN{1: 0x2000}; return s }(), wantWarn: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			skipEnd, _, err := resumeFrom(tt.pos, tt.srv)
			if err != nil {
				t.Fatal(err)
			}
			got, warn, err := resumeSplit(tt.pos, tt.srv, skipEnd)
			if tt.wantError {
				if !errors.Is(err, ErrHistoryMismatch) {
					t.Fatalf("err %v, want ErrHistoryMismatch", err)
				}
				return
			}
			if err != nil || got != tt.want || (warn != "") != tt.wantWarn {
				t.Fatalf("resumeSplit = %+v, %q, %v; want %+v, warning %v", got, warn, err, tt.want, tt.wantWarn)
			}
		})
	}
}

// TestEOSCommitsWholeTransactionsBeforeHalfTheTimeout: a Kafka
// transaction of whole Postgres transactions is committed at half the
// transaction timeout at the latest, whatever --transaction-max-interval
// says. With an interval above the timeout, a trickle of small
// transactions (fewer than TransactionMaxRecords per timeout) kept the
// Kafka transaction open until the broker aborted it, on every session
// after the restart too: nothing was ever committed.
func TestEOSCommitsWholeTransactionsBeforeHalfTheTimeout(t *testing.T) {
	c := eosCluster(t)
	const timeout = 800 * time.Millisecond
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour, TransactionTimeout: timeout}, 1)
	if err := el.txnFlushed(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	if due := el.eos.due(); due.IsZero() || time.Until(due) > timeout/2 {
		t.Errorf("commit due in %s, want within half the timeout (%s)", time.Until(due).Round(time.Millisecond), timeout/2)
	}
	// The loop wakes when the commit is due (wakeAt) and ticks.
	for deadline := time.Now().Add(2 * timeout); time.Now().Before(deadline) && el.eos.lastCommitted.EndLSN == 0; {
		time.Sleep(time.Until(el.wakeAtOrSoon()))
		if err := el.tick(t); err != nil {
			t.Fatalf("tick: %v", err)
		}
	}
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "a1" {
		t.Fatalf("read_committed saw %q, want a1 committed before the broker aborts it", got)
	}
	if n := testutil.ToFloat64(el.eos.m.timeouts); n != 0 {
		t.Fatalf("walbox_kafka_transaction_timeouts_total = %v, want 0", n)
	}
}

// wakeAtOrSoon is when the loop would stop waiting for WAL, at most 50ms
// from now (the unit loop has no status interval).
func (el *eosLoop) wakeAtOrSoon() time.Time {
	soon := time.Now().Add(50 * time.Millisecond)
	if due := el.eos.due(); !due.IsZero() && due.Before(soon) {
		return due
	}
	return soon
}

// TestEOSSplitAfterASplitTransactionEnded: a Postgres transaction whose
// last record ended a split part completes while no Kafka transaction is
// open; the next Postgres transaction is split before any whole one joins
// a Kafka transaction. The second split's position must say the first
// transaction is whole in Kafka: it named the last whole position before
// the first one instead, so a restart from the slot (not yet confirmed
// past the first) produced the first transaction's rows again, duplicates
// in read_committed.
func TestEOSSplitAfterASplitTransactionEnded(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	cfg := Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour, TransactionSplitRecords: 3}
	first := newEOSLoop(t, c, cfg, 1)
	if err := first.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	first.finish(t)
	first.wal(t, pgBegin(0x2000, 2))
	first.rows(t, "p1", "p2", "p3") // a part ends at its last record
	first.wal(t, pgCommit(0x2000))
	if err := first.tick(t); err != nil {
		t.Fatal(err)
	}
	first.wal(t, pgBegin(0x3000, 3))
	first.rows(t, "q1", "q2", "q3")
	if got, want := first.eos.lastCommitted.EndLSN, pglogrepl.LSN(0x2010); got != want {
		t.Errorf("the second split's position ends at %s, want the end of the first split transaction %s", got, want)
	}
	// The instance dies; the slot was not confirmed past A.
	second := newEOSLoop(t, c, cfg, 1)
	if err := second.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	second.wal(t, pgBegin(0x2000, 2))
	second.rows(t, "p1", "p2", "p3")
	second.wal(t, pgCommit(0x2000))
	if err := second.tick(t); err != nil {
		t.Fatal(err)
	}
	second.wal(t, pgBegin(0x3000, 3))
	second.rows(t, "q1", "q2", "q3", "q4")
	second.wal(t, pgCommit(0x3000))
	if err := second.tick(t); err != nil {
		t.Fatal(err)
	}
	second.finish(t)
	if got, want := strings.Join(readCommitted(t, c, eosTopic), " "), "a1 p1 p2 p3 q1 q2 q3 q4"; got != want {
		t.Fatalf("read_committed saw %q, want each row once: %q", got, want)
	}
}

// TestEOSSplitCountLeavesOutHeartbeats: the split count covers the
// inserts of the Postgres transaction and its transactional logical
// decoding messages of every prefix but walbox's own heartbeat prefix
// (walbox_heartbeat), which the loop observes before counting anything;
// docs/delivery.md said "of any prefix".
func TestEOSSplitCountLeavesOutHeartbeats(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 1000, TransactionMaxInterval: time.Hour, TransactionSplitRecords: 3}, 1)
	el.wal(t, pgRelation(outboxRel, "public", "outbox"))
	el.wal(t, pgBegin(0x2000, 2))
	el.rows(t, "p1")
	el.wal(t, pgMessage(true, 0x1100, heartbeat.Prefix, `{"sent_at":"2026-01-01T00:00:00Z"}`))
	el.wal(t, pgMessage(true, 0x1200, "another-tool", "x"))
	el.rows(t, "p2", "p3")
	// Committed after p3: p1, the other tool's message, p2 and p3 are 4
	// changes; the heartbeat is not one.
	if got := el.eos.lastCommitted.Split; got != (SplitPosition{CommitLSN: 0x2000, Changes: 4}) {
		t.Fatalf("split position %+v, want 4 changes of 0/2000 (p1, the other tool's message, p2, p3)", got)
	}
}
