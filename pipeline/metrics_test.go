package pipeline

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMetricsLint: every metric the relay registers passes promlint.
func TestMetricsLint(t *testing.T) {
	l := newTestLoop(t, Config{}, &fakeProducer{})
	problems, err := testutil.GatherAndLint(l.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}

// TestMetricsKeyCounters: the counters operators alert on count what they
// say, fed through the loop.
func TestMetricsKeyCounters(t *testing.T) {
	const message = `{"id":"m1","aggregate_type":"order","aggregate_id":"a","event_type":"x","payload":{}}`
	tests := []struct {
		name       string
		deadLetter string
		want       string
	}{
		{name: "without a dead-letter topic", want: `
# HELP walbox_events_produced_total Outbox events acknowledged by Kafka, dead-lettered ones included.
# TYPE walbox_events_produced_total counter
walbox_events_produced_total 2
# HELP walbox_events_dead_lettered_total Records routed to the dead-letter topic and acknowledged: invalid rows, records Kafka refuses, non-transactional outbox messages.
# TYPE walbox_events_dead_lettered_total counter
walbox_events_dead_lettered_total 0
# HELP walbox_messages_skipped_total Outbox messages (pg_logical_emit_message with the configured prefix) neither routed nor dead-lettered, by reason: non_transactional (emitted outside a transaction, with no dead-letter topic set).
# TYPE walbox_messages_skipped_total counter
walbox_messages_skipped_total{reason="non_transactional"} 1
# HELP walbox_foreign_changes_total Inserts into tables of the publication that are not the outbox tables, not routed.
# TYPE walbox_foreign_changes_total counter
walbox_foreign_changes_total 2
`},
		{name: "with a dead-letter topic", deadLetter: "dlq", want: `
# HELP walbox_events_produced_total Outbox events acknowledged by Kafka, dead-lettered ones included.
# TYPE walbox_events_produced_total counter
walbox_events_produced_total 3
# HELP walbox_events_dead_lettered_total Records routed to the dead-letter topic and acknowledged: invalid rows, records Kafka refuses, non-transactional outbox messages.
# TYPE walbox_events_dead_lettered_total counter
walbox_events_dead_lettered_total 1
# HELP walbox_messages_skipped_total Outbox messages (pg_logical_emit_message with the configured prefix) neither routed nor dead-lettered, by reason: non_transactional (emitted outside a transaction, with no dead-letter topic set).
# TYPE walbox_messages_skipped_total counter
walbox_messages_skipped_total{reason="non_transactional"} 0
# HELP walbox_foreign_changes_total Inserts into tables of the publication that are not the outbox tables, not routed.
# TYPE walbox_foreign_changes_total counter
walbox_foreign_changes_total 2
`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &fakeProducer{outcome: func(*kgo.Record) error { return nil }}
			l := newTestLoop(t, Config{DeadLetterTopic: tt.deadLetter, MessagePrefix: "outbox", Tables: []string{"outbox"}}, p)
			l.wal(t, pgRelation(outboxRel, "public", "outbox"))
			l.wal(t, pgRelation(outboxRel+1, "public", "audit"))
			l.wal(t, pgMessage(false, 0x500, "outbox", message))
			l.wal(t, pgBegin(0x1000, 1))
			l.wal(t, pgInsert(outboxRel, "e1", "a", `{}`))
			l.wal(t, pgInsert(outboxRel+1, "f1", "a", `{}`))
			l.wal(t, pgInsert(outboxRel+1, "f2", "a", `{}`))
			l.wal(t, pgInsert(outboxRel, "e2", "a", `{}`))
			l.wal(t, pgCommit(0x1000))
			if err := p.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			if err := testutil.GatherAndCompare(l.reg, strings.NewReader(tt.want),
				"walbox_events_produced_total", "walbox_events_dead_lettered_total",
				"walbox_messages_skipped_total", "walbox_foreign_changes_total"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMetricsReconnects: a session that cannot connect is retried and
// counted in walbox_postgres_reconnects_total.
func TestMetricsReconnects(t *testing.T) {
	l := newTestLoop(t, Config{BackoffMin: time.Millisecond, BackoffMax: 2 * time.Millisecond}, &fakeProducer{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- l.relay.Run(ctx, 1) }() // ConnString points at a closed port
	deadline := time.Now().Add(10 * time.Second)
	for testutil.ToFloat64(l.metrics.reconnects) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("reconnects = %v after 10s, want at least 2", testutil.ToFloat64(l.metrics.reconnects))
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run after cancel = %v, want nil", err)
	}
	if got := testutil.ToFloat64(l.metrics.streaming); got != 0 {
		t.Fatalf("walbox_streaming = %v while never connected", got)
	}
}
