package pipeline

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/router"
)

const outboxRel = 16384

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestLoopSettle: what the producer's callback does with each outcome.
func TestLoopSettle(t *testing.T) {
	// Within MaxBatchBytes (3100) as a batch of one, so it passes the
	// check before producing, but near it: a refusal as too large is then
	// about the record itself (the topic's limit lowered while running).
	big := `{"pad":"` + strings.Repeat("x", 2900) + `"}`
	tests := []struct {
		name       string
		deadLetter string
		payload    string
		err        error
		// want
		wantFailure   error // errors.Is target of the relay's failure; nil: none
		wantInFailure string
		wantRerouted  bool
		wantDLValue   bool
		wantConfirmed bool
	}{
		{name: "ack confirms the transaction", payload: `{}`, wantConfirmed: true},
		{name: "refusal without a dead-letter topic fails the relay", payload: `{}`, err: kerr.InvalidRecord, wantFailure: kerr.InvalidRecord},
		{name: "refused record goes to the dead-letter topic with its value", deadLetter: "dlq", payload: `{}`, err: kerr.InvalidRecord,
			wantRerouted: true, wantDLValue: true, wantConfirmed: true},
		{name: "record refused as too large goes to the dead-letter topic without its value", deadLetter: "dlq", payload: big, err: kerr.MessageTooLarge,
			wantRerouted: true, wantConfirmed: true},
		{name: "a small record refused with its batch stops with advice", deadLetter: "dlq", payload: `{}`, err: kerr.MessageTooLarge,
			wantFailure: kerr.MessageTooLarge, wantInFailure: "lower that flag"},
		{name: "authorisation is not the record's fault: stop even with a dead-letter topic", deadLetter: "dlq", payload: `{}`, err: kerr.TopicAuthorizationFailed,
			wantFailure: kerr.TopicAuthorizationFailed, wantInFailure: "grant WRITE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProducer{}
			// MaxBatchBytes 3100: the big record is near it, {} is not.
			l := newTestLoop(t, Config{DeadLetterTopic: tt.deadLetter, MaxBatchBytes: 3100}, p)
			l.wal(t, pgBegin(0x1000, 7))
			l.wal(t, pgRelation(outboxRel, "public", "outbox"))
			l.wal(t, pgInsert(outboxRel, "e1", "a1", tt.payload))
			l.wal(t, pgCommit(0x1000))
			p.settle(t, 0, tt.err)

			err := l.failureErr()
			if tt.wantFailure == nil && err != nil {
				t.Fatalf("relay failed: %v", err)
			}
			if tt.wantFailure != nil {
				var pe *ProduceError
				if !errors.Is(err, tt.wantFailure) || !errors.As(err, &pe) || pe.EventID != "e1" {
					t.Fatalf("failure = %v, want a ProduceError for e1 wrapping %v", err, tt.wantFailure)
				}
				if !strings.Contains(err.Error(), tt.wantInFailure) {
					t.Fatalf("failure %q does not say %q", err, tt.wantInFailure)
				}
			}
			if tt.wantRerouted {
				l.produceRerouted()
				recs := p.records()
				if len(recs) != 2 || recs[1].Topic != "dlq" {
					t.Fatalf("produced %v, want the record then its dead letter", p.topics())
				}
				dl := recs[1]
				if (dl.Value != nil) != tt.wantDLValue || header(dl, router.HeaderOriginalTopic) != "outbox.event.order" ||
					header(dl, router.HeaderEventID) != "e1" || !strings.Contains(header(dl, router.HeaderError), tt.err.Error()) {
					t.Fatalf("dead letter: value %d bytes, headers %v", len(dl.Value), dl.Headers)
				}
				if got := l.tracker.Confirmed(); got != 1 {
					t.Fatalf("confirmed %s before the dead letter was acknowledged", got)
				}
				p.settle(t, 1, nil)
				if got := testutil.ToFloat64(l.metrics.eventsDeadLettered); got != 1 {
					t.Errorf("dead-lettered = %v, want 1", got)
				}
			}
			if confirmed := l.tracker.Confirmed() == 0x1010; confirmed != tt.wantConfirmed {
				t.Fatalf("confirmed %s, want the commit end confirmed = %v", l.tracker.Confirmed(), tt.wantConfirmed)
			}
			if n := l.inflight.records.Load(); n != 0 && tt.wantFailure == nil {
				t.Fatalf("%d records still in flight", n)
			}
		})
	}
}

// TestLoopDrain: drain waits for every record in flight, produces the dead
// letters of refusals meanwhile, and returns with nothing in flight.
func TestLoopDrain(t *testing.T) {
	p := &fakeProducer{outcome: func(r *kgo.Record) error {
		time.Sleep(5 * time.Millisecond) // an ack takes time; not synchronisation
		if string(r.Key) == "refuse" && r.Topic != "dlq" {
			return kerr.InvalidRecord
		}
		return nil
	}}
	l := newTestLoop(t, Config{DeadLetterTopic: "dlq"}, p)
	l.wal(t, pgRelation(outboxRel, "public", "outbox"))
	for i, key := range []string{"a", "refuse", "b"} {
		commit := pglogrepl.LSN(0x1000 * (i + 1))
		l.wal(t, pgBegin(commit, uint32(i+1)))
		l.wal(t, pgInsert(outboxRel, "e"+key, key, `{}`))
		l.wal(t, pgCommit(commit))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l.drain(ctx)
	if n := l.inflight.records.Load(); n != 0 {
		t.Fatalf("%d records in flight after drain", n)
	}
	if got := p.topics(); len(got) != 4 || got[3] != "dlq" {
		t.Fatalf("produced %v, want three records and one dead letter", got)
	}
	if got := l.tracker.Confirmed(); got != 0x3010 {
		t.Fatalf("confirmed %s after drain, want 0/3010", got)
	}
	if err := l.failureErr(); err != nil {
		t.Fatal(err)
	}
}

// TestLoopReplayKeysOnPosition: after a reconnect the server sends again
// every unconfirmed transaction; what Kafka acknowledged is skipped by
// (commit LSN, position), never by event id.
//
// How it broke: the replay set held event ids, so a row sharing its id with
// an acknowledged one was skipped, and its transaction confirmed: lost.
func TestLoopReplayKeysOnPosition(t *testing.T) {
	p := &fakeProducer{outcome: func(*kgo.Record) error { return nil }}
	l := newTestLoop(t, Config{}, p)
	// Session 1: transaction A (two rows) is received whole; of
	// transaction B only the first row arrives before the connection
	// drops. Every row carries the event id "dup".
	l.wal(t, pgRelation(outboxRel, "public", "outbox"))
	l.wal(t, pgBegin(0x1000, 1))
	l.wal(t, pgInsert(outboxRel, "dup", "a", `{"n":1}`))
	l.wal(t, pgInsert(outboxRel, "dup", "a", `{"n":2}`))
	l.wal(t, pgCommit(0x1000))
	l.wal(t, pgBegin(0x2000, 2))
	l.wal(t, pgInsert(outboxRel, "dup", "a", `{"n":3}`))
	l.reconnect(t)
	// Session 2 resends A and B whole, then C, never received before.
	l.wal(t, pgRelation(outboxRel, "public", "outbox"))
	l.wal(t, pgBegin(0x1000, 1))
	l.wal(t, pgInsert(outboxRel, "dup", "a", `{"n":1}`))
	l.wal(t, pgInsert(outboxRel, "dup", "a", `{"n":2}`))
	l.wal(t, pgCommit(0x1000))
	l.wal(t, pgBegin(0x2000, 2))
	l.wal(t, pgInsert(outboxRel, "dup", "a", `{"n":3}`))
	l.wal(t, pgInsert(outboxRel, "dup", "a", `{"n":4}`))
	l.wal(t, pgCommit(0x2000))
	l.wal(t, pgBegin(0x3000, 3))
	l.wal(t, pgInsert(outboxRel, "dup", "a", `{"n":5}`))
	l.wal(t, pgCommit(0x3000))
	if err := p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.records() {
		got = append(got, string(r.Value))
	}
	want := []string{`{"n":1}`, `{"n":2}`, `{"n":3}`, `{"n":4}`, `{"n":5}`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("produced %v, want each row once: %v", got, want)
	}
	if n := testutil.ToFloat64(l.metrics.duplicatesSkipped); n != 3 {
		t.Fatalf("duplicates skipped = %v, want 3", n)
	}
	if got := l.tracker.Confirmed(); got != 0x3010 {
		t.Fatalf("confirmed %s, want 0/3010", got)
	}
}

// TestLoopNonTransactionalMessage: a non-transactional outbox message is
// skipped (metric, warning) or dead-lettered; it never stops the relay, and
// a dead-lettered one holds confirmation back until Kafka has it.
func TestLoopNonTransactionalMessage(t *testing.T) {
	const content = `{"id":"m1","aggregate_type":"order","aggregate_id":"a","event_type":"x","payload":{}}`
	t.Run("skipped", func(t *testing.T) {
		p := &fakeProducer{}
		l := newTestLoop(t, Config{MessagePrefix: "outbox"}, p)
		l.wal(t, pgMessage(false, 0x500, "outbox", content))
		l.wal(t, pgMessage(false, 0x600, "other", "not ours"))
		if len(p.records()) != 0 {
			t.Fatalf("produced %v", p.topics())
		}
		if n := testutil.ToFloat64(l.metrics.nonTransactionalSkipped); n != 1 {
			t.Fatalf("skipped = %v, want 1", n)
		}
		if l.log.Count("lsn=0/500") != 1 || l.log.Count("prefix=outbox") != 1 {
			t.Fatalf("warning does not name the LSN and prefix: %s", l.log.String())
		}
		if got := l.tracker.ObserveServerPosition(0x700); got != 0x700 {
			t.Fatalf("a keepalive past the skipped message confirms %s, want 0/700", got)
		}
	})
	t.Run("dead-lettered", func(t *testing.T) {
		p := &fakeProducer{}
		l := newTestLoop(t, Config{MessagePrefix: "outbox", DeadLetterTopic: "dlq"}, p)
		l.wal(t, pgMessage(false, 0x500, "outbox", content))
		recs := p.records()
		if len(recs) != 1 || recs[0].Topic != "dlq" || string(recs[0].Value) != content ||
			header(recs[0], router.HeaderLSN) != "0/500" || !strings.Contains(header(recs[0], router.HeaderError), "not transactional") {
			t.Fatalf("produced %+v, want the message on the dead-letter topic", recs)
		}
		if got := l.tracker.ObserveServerPosition(0x700); got != 1 {
			t.Fatalf("a keepalive confirmed %s before the dead letter was acknowledged", got)
		}
		p.settle(t, 0, nil)
		if got := l.tracker.Confirmed(); got != 0x500 {
			t.Fatalf("confirmed %s after the ack, want the message's LSN 0/500", got)
		}
	})
}

// TestLoopRoutesOnlyTheOutboxTables: inserts of another table in the
// publication are counted and logged once, not routed.
func TestLoopRoutesOnlyTheOutboxTables(t *testing.T) {
	p := &fakeProducer{}
	l := newTestLoop(t, Config{Tables: []string{"public.outbox"}, MessagePrefix: "outbox"}, p)
	l.wal(t, pgRelation(outboxRel, "public", "outbox"))
	l.wal(t, pgRelation(outboxRel+1, "public", "audit"))
	l.wal(t, pgBegin(0x1000, 1))
	for i := 0; i < 3; i++ {
		l.wal(t, pgInsert(outboxRel+1, "f", "a", `{}`))
		l.wal(t, pgInsert(outboxRel, "o", "a", `{}`))
	}
	// Outbox messages have a synthetic relation: they still route.
	l.wal(t, pgMessage(true, 0x900, "outbox", `{"id":"m","aggregate_type":"order","aggregate_id":"a","event_type":"x","payload":{}}`))
	l.wal(t, pgCommit(0x1000))
	if got := len(p.records()); got != 4 {
		t.Fatalf("produced %d records, want 3 outbox rows and 1 message", got)
	}
	if n := testutil.ToFloat64(l.metrics.foreignChanges); n != 3 {
		t.Fatalf("foreign changes = %v, want 3", n)
	}
	if n := l.log.Count("table=public.audit"); n != 1 {
		t.Fatalf("foreign table logged %d times, want once", n)
	}
}

// TestLoopChecksSizeBeforeProducing: a record larger than its topic accepts
// is decided in stream order, before later records of its key are produced.
//
// How it broke: the record was produced and refused after the fact, while
// later records of the same key were acknowledged; a restart then delivered
// R2 R3 R1 R2 R3.
func TestLoopChecksSizeBeforeProducing(t *testing.T) {
	big := `{"pad":"` + strings.Repeat("x", 2000) + `"}`
	feed := func(t *testing.T, l *testLoop) error {
		l.wal(t, pgRelation(outboxRel, "public", "outbox"))
		for i, payload := range []string{`{"n":0}`, big, `{"n":2}`} {
			commit := pglogrepl.LSN(0x1000 * (i + 1))
			l.wal(t, pgBegin(commit, uint32(i+1)))
			if err := l.handleWAL(0, pgInsert(outboxRel, "e"+string(rune('0'+i)), "same-key", payload)); err != nil {
				return err
			}
			l.wal(t, pgCommit(commit))
		}
		return nil
	}
	t.Run("dead-lettered in place", func(t *testing.T) {
		p := &fakeProducer{}
		limits := &fakeLimits{limits: map[string]int{"outbox.event.order": 1000, "dlq": 1000}}
		l := newTestLoop(t, Config{DeadLetterTopic: "dlq", TopicLimits: limits}, p)
		if err := feed(t, l); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(p.topics(), " "); got != "outbox.event.order dlq outbox.event.order" {
			t.Fatalf("produced to %s, want the dead letter in the big record's place", got)
		}
		dl := p.records()[1]
		reason := header(dl, router.HeaderError)
		if dl.Value != nil || header(dl, router.HeaderEventID) != "e1" || !strings.Contains(reason, "over the limit of 1000 bytes") ||
			!strings.Contains(reason, "max.message.bytes") {
			t.Fatalf("dead letter value %d bytes, reason %q", len(dl.Value), reason)
		}
		if limits.calls["outbox.event.order"] != 1 {
			t.Fatalf("looked the topic up %d times, want once", limits.calls["outbox.event.order"])
		}
	})
	t.Run("stops before it under fail", func(t *testing.T) {
		p := &fakeProducer{}
		l := newTestLoop(t, Config{TopicLimits: &fakeLimits{limits: map[string]int{"outbox.event.order": 1000}}}, p)
		err := feed(t, l)
		var pe *ProduceError
		if !errors.As(err, &pe) || !errors.Is(err, kerr.MessageTooLarge) || !pe.Checked {
			t.Fatalf("err = %v, want a checked ProduceError wrapping MessageTooLarge", err)
		}
		for _, want := range []string{`"e1"`, `"outbox.event.order"`, "over the limit of 1000 bytes", "checked before producing", "--invalid-rows=dead-letter"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("error %q does not say %s", err, want)
			}
		}
		if got := p.topics(); len(got) != 1 {
			t.Fatalf("produced %v, want only the record before the big one", got)
		}
		p.settle(t, 0, nil)
		if got := l.tracker.Confirmed(); got != 0x1010 {
			t.Fatalf("confirmed %s, want the transaction before the big record (0/1010)", got)
		}
	})
	t.Run("lookup failure falls back to the batch limit, said once", func(t *testing.T) {
		p := &fakeProducer{}
		limits := &fakeLimits{err: errors.New("no DESCRIBE_CONFIGS")}
		l := newTestLoop(t, Config{DeadLetterTopic: "dlq", MaxBatchBytes: 1500, TopicLimits: limits}, p)
		if err := feed(t, l); err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(p.topics(), " "); got != "outbox.event.order dlq outbox.event.order" {
			t.Fatalf("produced to %s", got)
		}
		if !strings.Contains(header(p.records()[1], router.HeaderError), "producer batch limit") {
			t.Fatalf("reason %q does not name the batch limit", header(p.records()[1], router.HeaderError))
		}
		if n := l.log.Count("could not read a topic's max.message.bytes"); n != 1 {
			t.Fatalf("fallback logged %d times, want once", n)
		}
	})
	// Issue 29: a topic being auto-created has no configs to describe at
	// its first record; its limit used to be the batch limit for good.
	t.Run("a failed lookup is retried and the limit learned", func(t *testing.T) {
		old := topicLimitRetry
		topicLimitRetry = 0 // every record asks again until a lookup works
		t.Cleanup(func() { topicLimitRetry = old })
		p := &fakeProducer{}
		limits := &fakeLimits{err: kerr.UnknownTopicOrPartition}
		l := newTestLoop(t, Config{DeadLetterTopic: "dlq", MaxBatchBytes: 100000, TopicLimits: limits}, p)
		if got := l.limitFor("outbox.event.order"); got.bytes != 100000 {
			t.Fatalf("limit %d before the topic exists, want the batch limit 100000", got.bytes)
		}
		limits.mu.Lock()
		limits.err, limits.limits = nil, map[string]int{"outbox.event.order": 1000}
		limits.mu.Unlock()
		// The retry is made in the background; the topic keeps the
		// batch limit until its answer is in.
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := l.limitFor("outbox.event.order")
			if got.bytes == 1000 && strings.Contains(got.source, "max.message.bytes") {
				break
			}
			if got.bytes != 100000 || time.Now().After(deadline) {
				t.Fatalf("limit %d (%s) once the topic exists, want the batch limit until the retry answers, then its max.message.bytes 1000", got.bytes, got.source)
			}
			time.Sleep(time.Millisecond) // polling for the background lookup
		}
		calls := func() int {
			limits.mu.Lock()
			defer limits.mu.Unlock()
			return limits.calls["outbox.event.order"]
		}
		n := calls()
		l.limitFor("outbox.event.order")
		l.relay.limits.wait()
		if got := calls(); got != n || n < 2 {
			t.Fatalf("looked the topic up %d times, then %d; want at least twice (failed, then learned), then not again", n, got)
		}
		if n := l.log.Count("learned a topic's max.message.bytes"); n != 1 {
			t.Fatalf("learning logged %d times, want once", n)
		}
	})
	// A retry that Kafka does not answer (brokers frozen) used to hold the
	// replication loop for the lookup's 10 s timeout, every 30 s.
	t.Run("a retry Kafka does not answer does not hold the loop", func(t *testing.T) {
		old := topicLimitRetry
		topicLimitRetry = 0
		t.Cleanup(func() { topicLimitRetry = old })
		p := &fakeProducer{}
		limits := &fakeLimits{err: kerr.UnknownTopicOrPartition}
		l := newTestLoop(t, Config{MaxBatchBytes: 100000, TopicLimits: limits}, p)
		l.limitFor("outbox.event.order")
		hang := make(chan struct{})
		defer close(hang)
		limits.mu.Lock()
		limits.hang = hang
		limits.mu.Unlock()
		for range 3 {
			if got := l.limitFor("outbox.event.order"); got.bytes != 100000 {
				t.Fatalf("limit %d while the retry hangs, want the batch limit 100000", got.bytes)
			}
		}
		calls := func() int {
			limits.mu.Lock()
			defer limits.mu.Unlock()
			return limits.calls["outbox.event.order"]
		}
		deadline := time.Now().Add(10 * time.Second)
		for calls() < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // polling for the background lookup to begin
		}
		if n := calls(); n != 2 {
			t.Fatalf("looked up %d times, want 2 (the first, and one retry out at a time)", n)
		}
		// limitFor returned with the lookup still waiting for Kafka:
		// the loop did not wait for it (the old code returned only once
		// the lookup's context had ended it).
		if n := limits.hungLookups(); n != 0 {
			t.Fatalf("%d lookups ended before limitFor returned, want 0: the loop waited for Kafka", n)
		}
		// At stop (Relay.Run's end) the lookup is cancelled, not
		// waited out to its timeout.
		l.relay.limits.wait()
		limits.mu.Lock()
		hung, why := limits.hung, limits.hungErr
		limits.mu.Unlock()
		if hung != 1 || !errors.Is(why, context.Canceled) {
			t.Fatalf("after the stop: %d hung lookups ended, the last by %v; want 1, cancelled", hung, why)
		}
	})
}

func TestParseGUCDuration(t *testing.T) {
	tests := []struct {
		in      string
		want    time.Duration
		wantErr bool
	}{
		{in: "60s", want: time.Minute},
		{in: "1min", want: time.Minute},
		{in: "4s", want: 4 * time.Second},
		{in: "500ms", want: 500 * time.Millisecond},
		{in: "1500", want: 1500 * time.Millisecond},
		{in: "0", want: 0},
		{in: "2h", want: 2 * time.Hour},
		{in: "1d", want: 24 * time.Hour},
		{in: "", wantErr: true},
		{in: "s", wantErr: true},
		{in: "10 fortnights", wantErr: true},
	}
	for _, tt := range tests {
		got, err := parseGUCDuration(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("parseGUCDuration(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

// FuzzParseGUCDuration: the server's SHOW output is bytes from the network;
// whatever it is, parsing must not panic, and a value it accepts is never
// negative (an overflowing number is refused, not wrapped).
func FuzzParseGUCDuration(f *testing.F) {
	for _, s := range []string{"60s", "1min", "500ms", "1500", "0", "2h", "1d", "", "s", "99999999999999999999d", "9223372036854775807d"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := parseGUCDuration(s)
		if err == nil && d < 0 {
			t.Fatalf("parseGUCDuration(%q) = %v, want a non-negative duration or an error", s, d)
		}
	})
}
