package e2e

import (
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/jaegertest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
)

// TestTracingInJaeger (full run): a writer's trace, through the built
// walbox binary and a real broker, shows in a real Jaeger v2 as the
// writer's span, walbox's producer span under it and the consumer's span
// under walbox's, with the messaging attributes and the wait explained; at
// least-once over OTLP gRPC and exactly-once over OTLP HTTP.
func TestTracingInJaeger(t *testing.T) {
	fulltest.Require(t, "it needs the Jaeger binary that .ci/jaeger-build builds (minutes, once per machine)")
	bin := jaegertest.Binary(t, 20*time.Minute)
	started := time.Now()
	j := jaegertest.Start(t, bin)
	broker := kafkatest.Start(t)
	for _, tc := range []struct {
		name  string
		proto string
		eos   bool
	}{
		{name: "at-least-once over grpc", proto: "grpc"},
		{name: "exactly-once over http", proto: "http/protobuf", eos: true},
		{name: "at-least-once over http", proto: "http/protobuf"},
	} {
		t.Run(tc.name, func(t *testing.T) { testTracingInJaeger(t, j, broker, tc.proto, tc.eos) })
	}
	t.Logf("tracing e2e took %s", time.Since(started).Round(time.Millisecond))
}

func testTracingInJaeger(t *testing.T, j *jaegertest.Jaeger, broker *kafkatest.Broker, proto string, eos bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	f := newFixture(t, broker.Addrs())
	env := append(f.env, "OTEL_SERVICE_NAME=walbox", "OTEL_EXPORTER_OTLP_PROTOCOL="+proto, "OTEL_BSP_SCHEDULE_DELAY=100")
	if proto == "grpc" {
		env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+j.OTLPGRPC)
	} else {
		env = append(env, "OTEL_EXPORTER_OTLP_ENDPOINT=http://"+j.OTLPHTTP)
	}
	topic := "outbox.event.order"
	if eos {
		env = append(env, eosEnv("walbox-state.tracing", 100*time.Millisecond)...)
	}
	p := startWalbox(t, env)

	// The writing service: its own tracer, exporting to Jaeger.
	exp, err := otlptracehttp.New(ctx, otlptracehttp.WithEndpoint(j.OTLPHTTP), otlptracehttp.WithInsecure())
	if err != nil {
		t.Fatal(err)
	}
	res := resource.NewSchemaless()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp), sdktrace.WithResource(res))
	defer tp.Shutdown(context.Background())
	prop := propagation.TraceContext{}
	wctx, wspan := tp.Tracer("writer").Start(ctx, "place order")
	carrier := propagation.MapCarrier{}
	prop.Inject(wctx, carrier)
	conn, err := pgx.Connect(ctx, f.pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var id string
	if err := conn.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES ('order', 'o-1', 'created', '{}', jsonb_build_object('traceparent', $1::text)) RETURNING id::text`, carrier["traceparent"]).Scan(&id); err != nil {
		t.Fatal(err)
	}
	wspan.End()
	traceID := wspan.SpanContext().TraceID().String()

	// The consumer: continues the trace from the record's traceparent.
	col := startCollectorPattern(ctx, t, broker.Addrs(), `outbox\.event\..*`)
	// The broker is shared by the subtests: the topic holds their events too.
	var rec outboxtest.Received
	waitUntil(ctx, t, 2*time.Minute, "event "+id+" in Kafka", func() bool {
		for _, r := range col.snapshot() {
			if r.Headers["event_id"] == id {
				rec = r
				return true
			}
		}
		return false
	})
	cctx := prop.Extract(ctx, propagation.MapCarrier(rec.Headers))
	_, cspan := tp.Tracer("consumer").Start(cctx, "process order", trace.WithSpanKind(trace.SpanKindConsumer))
	cspan.End()

	var spans []jaegertest.Span
	deadline := time.Now().Add(time.Minute)
	for {
		if spans, err = j.Trace(ctx, traceID); err != nil {
			t.Fatal(err)
		}
		if len(spans) >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s has %d spans in Jaeger after a minute, want 3 (writer, walbox, consumer): %+v; walbox log:\n%s", traceID, len(spans), spans, p.stderr.Tail(3000))
		}
		time.Sleep(100 * time.Millisecond) // polling Jaeger, not synchronisation
	}
	by := map[string]jaegertest.Span{}
	for _, s := range spans {
		by[s.OperationName] = s
	}
	writer, relay, consumer := by["place order"], by["send "+topic], by["process order"]
	if relay.SpanID == "" || writer.SpanID == "" || consumer.SpanID == "" {
		t.Fatalf("spans %+v, want place order, send %s, process order", spans, topic)
	}
	if relay.Parent() != writer.SpanID {
		t.Errorf("walbox's span's parent %q, want the writer's span %s", relay.Parent(), writer.SpanID)
	}
	if consumer.Parent() != relay.SpanID {
		t.Errorf("the consumer's span's parent %q, want walbox's span %s", consumer.Parent(), relay.SpanID)
	}
	for k, want := range map[string]string{
		"messaging.system":                   "kafka",
		"messaging.destination.name":         topic,
		"messaging.operation.type":           "send",
		"messaging.message.id":               id,
		"messaging.destination.partition.id": strconv.Itoa(int(rec.Partition)),
		"messaging.kafka.offset":             strconv.FormatInt(rec.Offset, 10),
		"span.kind":                          "producer",
	} {
		if got := relay.Tag(k); got != want {
			t.Errorf("walbox span tag %s = %q, want %q", k, got, want)
		}
	}
	for _, k := range []string{"walbox.commit_lsn", "walbox.commit_time", "walbox.wait_before_produce_seconds", "walbox.commit_to_read_seconds"} {
		if relay.Tag(k) == "" {
			t.Errorf("walbox span lacks %s (tags %+v)", k, relay.Tags)
		}
	}
	// Timing: walbox read the transaction after the writer began it, and
	// its span lasted until Kafka's ack.
	if relay.StartTime < writer.StartTime || relay.Duration <= 0 {
		t.Errorf("walbox span starts at %d µs (writer %d) and lasts %d µs", relay.StartTime, writer.StartTime, relay.Duration)
	}
	t.Logf("trace %s: writer %s, walbox %s (%d µs, waited %s s before produce), consumer %s",
		traceID, writer.SpanID, relay.SpanID, relay.Duration, relay.Tag("walbox.wait_before_produce_seconds"), consumer.SpanID)
	if code := p.stop(t, syscall.SIGTERM, time.Minute); code != 0 {
		t.Errorf("walbox exit code %d", code)
	}
}
