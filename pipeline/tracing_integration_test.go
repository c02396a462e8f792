package pipeline_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/tracing"
)

// TestTracingRowContextBecomesParent: real Postgres, kfake. Of three rows
// in one transaction, the one whose traceparent is sampled gets a producer
// span under the row's span, spanning from the transaction's read to the
// ack, with the record's topic, partition, offset and event id; the
// consumer sees walbox's span in its traceparent. The unsampled row and
// the row without a context get no span and go out as written.
func TestTracingRowContextBecomesParent(t *testing.T) {
	parallel(t)
	const (
		rowTrace  = "4bf92f3577b34da6a3ce929d0e0e4736"
		rowSpan   = "00f067aa0ba902b7"
		sampled   = "00-" + rowTrace + "-" + rowSpan + "-01"
		unsampled = "00-" + rowTrace + "-" + rowSpan + "-00"
	)
	exp := tracetest.NewInMemoryExporter()
	tracer := tracing.NewWithExporter(tracing.Config{BatchDelay: time.Hour}, exp, nil, nil, nil, nil)
	t.Cleanup(func() { _ = tracer.Shutdown(context.Background()) })
	e := startEnvWith(t, time.Second, func(c *pipeline.Config) { c.Tracer = tracer })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	var before pglogrepl.LSN
	if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	written := time.Now()
	var ids [3]string
	if err := e.conn.QueryRow(ctx, `
		WITH w AS (INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES
			('order', 'o-1', 'created', '{}', jsonb_build_object('traceparent', $1::text)),
			('order', 'o-2', 'created', '{}', jsonb_build_object('traceparent', $2::text)),
			('order', 'o-3', 'created', '{}', '{}')
			RETURNING id, aggregate_id)
		SELECT (SELECT id::text FROM w WHERE aggregate_id = 'o-1'), (SELECT id::text FROM w WHERE aggregate_id = 'o-2'), (SELECT id::text FROM w WHERE aggregate_id = 'o-3')`,
		sampled, unsampled).Scan(&ids[0], &ids[1], &ids[2]); err != nil {
		t.Fatal(err)
	}

	consumer, err := outboxtest.NewConsumer(e.brokers, "outbox\\.event\\..*")
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return outboxtest.DistinctIDs(got) >= 3 })
	if err != nil {
		t.Fatal(err)
	}
	recs := map[string]outboxtest.Received{}
	for _, r := range got {
		recs[r.Headers["event_id"]] = r
	}

	if err := tracer.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (the sampled row's): %v", len(spans), spans)
	}
	s := spans[0]
	if s.SpanKind != trace.SpanKindProducer || s.Parent.TraceID().String() != rowTrace || s.Parent.SpanID().String() != rowSpan {
		t.Errorf("span kind %v parent %s/%s, want a producer span under the row's %s/%s", s.SpanKind, s.Parent.TraceID(), s.Parent.SpanID(), rowTrace, rowSpan)
	}
	r := recs[ids[0]]
	attrs := map[string]string{}
	for _, kv := range s.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	for k, want := range map[string]string{
		"messaging.system":                   "kafka",
		"messaging.destination.name":         r.Topic,
		"messaging.message.id":               ids[0],
		"messaging.destination.partition.id": strconv.Itoa(int(r.Partition)),
		"messaging.kafka.offset":             strconv.FormatInt(r.Offset, 10),
	} {
		if attrs[k] != want {
			t.Errorf("%s = %q, want %q", k, attrs[k], want)
		}
	}
	lsn, err := pglogrepl.ParseLSN(attrs[tracing.AttrCommitLSN])
	if err != nil || lsn <= before {
		t.Errorf("%s = %q (%v), want a commit LSN after %s", tracing.AttrCommitLSN, attrs[tracing.AttrCommitLSN], err, before)
	}
	if s.StartTime.Before(written.Add(-time.Second)) || s.EndTime.After(r.At) || !s.EndTime.After(s.StartTime) {
		t.Errorf("span %v to %v, want within the write (%v) and the consumer's receipt (%v)", s.StartTime, s.EndTime, written, r.At)
	}
	if want := "00-" + rowTrace + "-" + s.SpanContext.SpanID().String() + "-01"; r.Headers["traceparent"] != want {
		t.Errorf("consumed traceparent %q, want walbox's span %q", r.Headers["traceparent"], want)
	}
	if got := recs[ids[1]].Headers["traceparent"]; got != unsampled {
		t.Errorf("unsampled row's traceparent %q, want %q unchanged", got, unsampled)
	}
	if got, ok := recs[ids[2]].Headers["traceparent"]; ok {
		t.Errorf("row without a context went out with traceparent %q", got)
	}
}

// TestTracingReplayedEvents: walbox replay traces the events it sends
// again, under the row's span, marked walbox.replayed.
func TestTracingReplayedEvents(t *testing.T) {
	const rowSpan = "00f067aa0ba902b7"
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	setupReplaySource(ctx, t, conn)
	var from pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers) VALUES
		('order', 'o-1', 'created', '{}', jsonb_build_object('traceparent', '00-4bf92f3577b34da6a3ce929d0e0e4736-`+rowSpan+`-01')),
		('order', 'o-2', 'created', '{}', '{}')`); err != nil {
		t.Fatal(err)
	}
	exp := tracetest.NewInMemoryExporter()
	tracer := tracing.NewWithExporter(tracing.Config{BatchDelay: time.Hour}, exp, nil, nil, nil, nil)
	t.Cleanup(func() { _ = tracer.Shutdown(context.Background()) })
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := &ackingProducer{}
	res, err := pipeline.Replay(ctx, pipeline.ReplayConfig{
		ConnString: srv.DSN("postgres"), Publication: "walbox", Slot: "walbox_replay", Tables: []string{"public.outbox"},
		Range: pipeline.Range{FromLSN: from}, From: from.String(), StatusInterval: 50 * time.Millisecond, Tracer: tracer,
	}, p, rt, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := tracer.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	if res.Events() != 2 || len(spans) != 1 {
		t.Fatalf("%d events replayed, %d spans; want 2 and 1", res.Events(), len(spans))
	}
	replayed := false
	for _, kv := range spans[0].Attributes {
		if kv.Key == tracing.AttrReplayed {
			replayed = kv.Value.AsBool()
		}
	}
	if spans[0].Parent.SpanID().String() != rowSpan || !replayed {
		t.Errorf("span parent %s replayed %v, want %s and true", spans[0].Parent.SpanID(), replayed, rowSpan)
	}
}
