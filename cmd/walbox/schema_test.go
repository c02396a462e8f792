package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/registrytest"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/schemareg"
)

const orderAvro = `{"type": "record", "name": "Order", "namespace": "shop", "fields": [
  {"name": "n", "type": "int"},
  {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}}]}`

// TestRunAvro: walbox run --value-format avro sends each row's payload in
// Confluent's wire format with the id of the schema registered under
// <topic>-value, and it decodes to the payload (--key-format avro: the key
// to the aggregate id, with <topic>-key's schema); a row whose payload breaks
// the schema is dead-lettered with the field path, or under the fail policy
// stops walbox naming the row, its LSN and the field path.
func TestRunAvro(t *testing.T) {
	parallel(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	runAvro(t, reg.URL())
}

// TestRunAvroApicurio is TestRunAvro against a real registry.
func TestRunAvroApicurio(t *testing.T) {
	fulltest.Require(t, "starts Apicurio Registry")
	runAvro(t, registrytest.Start(t).URL)
}

func runAvro(t *testing.T, registryURL string) {
	e := newTableEnv(t)
	admin, err := sr.NewClient(sr.URLs(registryURL))
	if err != nil {
		t.Fatal(err)
	}
	register := func(subject, schema string) int {
		t.Helper()
		ss, err := admin.CreateSchema(context.Background(), subject, sr.Schema{Schema: schema})
		if err != nil {
			t.Fatal(err)
		}
		return ss.ID
	}
	id := register("outbox.event.order-value", orderAvro)
	keyID := register("outbox.event.order-key", `"string"`)
	schema := avro.MustParse(orderAvro)
	insert := func(n int, payload string) {
		t.Helper()
		e.exec(t, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', 'o-1', 'placed', $2::jsonb)`,
			tid(n), payload)
	}

	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.ValueFormat, cfg.KeyFormat = "avro", "avro"
	cfg.SchemaRegistry.URLs = []string{registryURL}
	cfg.InvalidRows, cfg.DeadLetterTopic = "dead-letter", "outbox.dlq"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	in := startInstance(t, cfg)
	waitFor(t, "walbox to be ready", func() bool { c, _ := in.get("/readyz"); return c == 200 })
	insert(1, `{"n": 1, "status": "NEW"}`)
	insert(2, `{"n": "2", "status": "NEW"}`)
	insert(3, `{"n": 3, "status": "PAID"}`)

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("walbox logs:\n%s", in.logs.Tail(4000))
		}
	})
	recs := consumeNew(t, e.brokers, `^outbox\.event\.order$`, 2)
	want := []map[string]any{{"n": 1, "status": "NEW"}, {"n": 3, "status": "PAID"}}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i, r := range recs {
		gotID, body, err := schemareg.ParseHeader(r.Value)
		if err != nil || int(gotID) != id {
			t.Fatalf("record %d: header id %d, %v; want %d", i, gotID, err, id)
		}
		var got map[string]any
		if err := avro.Unmarshal(schema, body, &got); err != nil {
			t.Fatal(err)
		}
		if got["n"] != want[i]["n"] || got["status"] != want[i]["status"] {
			t.Errorf("record %d decodes to %v, want %v", i, got, want[i])
		}
		// The key: the aggregate id as an Avro string, with the <topic>-key schema.
		kid, kbody, err := schemareg.ParseHeader(r.Key)
		var key string
		if err != nil || int(kid) != keyID || avro.Unmarshal(avro.MustParse(`"string"`), kbody, &key) != nil || key != "o-1" {
			t.Errorf("record %d: key %q (id %d, %v) decodes to %q, want o-1 with id %d", i, r.Key, kid, err, key, keyID)
		}
		if header(r, router.HeaderEventID) != tid(1+2*i) {
			t.Errorf("record %d: event id %q", i, header(r, router.HeaderEventID))
		}
	}
	dlq := consumeNew(t, e.brokers, `^outbox\.dlq$`, 1)
	if len(dlq) != 1 || header(dlq[0], router.HeaderEventID) != tid(2) {
		t.Fatalf("dead letters %v, want row 2", dlq)
	}
	reason := header(dlq[0], router.HeaderError)
	for _, w := range []string{"$.n", "expected an integer (int)", `the string "2"`, `subject "outbox.event.order-value"`} {
		if !strings.Contains(reason, w) {
			t.Errorf("dead-letter reason %q lacks %q", reason, w)
		}
	}
	if string(dlq[0].Value) != `{"n": "2", "status": "NEW"}` || string(dlq[0].Key) != "o-1" {
		t.Errorf("dead letter key %q value %q, want both as written", dlq[0].Key, dlq[0].Value)
	}
	_, metrics := in.get("/metrics")
	if l := metricLine(metrics, `walbox_schema_cache_misses_total{role="value"}`); l != `walbox_schema_cache_misses_total{role="value"} 1` {
		t.Errorf("metric line %q, want one cache miss for three rows", l)
	}
	in.stop(t)

	// Under the fail policy the bad row stops walbox, naming it.
	cfg.InvalidRows, cfg.DeadLetterTopic = "fail", ""
	insert(4, `{"n": 4, "status": "SHIPPED"}`)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = runRelay(ctx, cfg, e.logs)
	var ire *router.InvalidRowError
	if !errors.As(err, &ire) {
		t.Fatalf("walbox run: %v, want an invalid row\n%s", err, e.logs.Tail(2000))
	}
	for _, w := range []string{`id "` + tid(4) + `"`, "at LSN ", "$.status", `unknown symbol "SHIPPED"`} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}

// consumeNew reads n records of the topics matching re, which may not exist
// yet: the consumer refreshes its metadata often to find them.
func consumeNew(t *testing.T, brokers []string, re string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeRegex(), kgo.ConsumeTopics(re),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.MetadataMaxAge(250*time.Millisecond), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(got), n, re)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	return got
}

// TestRunAvroRegistryFaults: while the registry answers 503 walbox retries
// (the row is not confirmed, the session restarts from the confirmed
// position) and says so in /readyz, and the row arrives once the registry
// recovers, exactly once; a
// registry that refuses walbox's credentials (401) stops it, naming the
// subject and the fix.
func TestRunAvroRegistryFaults(t *testing.T) {
	parallel(t)
	e := newTableEnv(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	for _, s := range []string{"outbox.event.order-value", "outbox.event.invoice-value"} {
		if _, _, err := reg.RegisterSchema(s, sr.Schema{Schema: orderAvro}); err != nil {
			t.Fatal(err)
		}
	}
	var status atomic.Int32 // the status injected; 0 answers normally
	var faults atomic.Int64
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		s := status.Load()
		if s == 0 {
			return false
		}
		faults.Add(1)
		w.WriteHeader(int(s))
		w.Write([]byte(`{"error_code": ` + strconv.Itoa(int(s)) + `, "message": "injected"}`))
		return true
	})
	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.ValueFormat = "avro"
	cfg.SchemaRegistry.URLs = []string{reg.URL()}
	cfg.SchemaRegistry.RetryBudget = 300 * time.Millisecond
	in := startInstance(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("walbox logs:\n%s", in.logs.Tail(4000))
		}
	})
	waitFor(t, "walbox to be ready", func() bool { c, _ := in.get("/readyz"); return c == 200 })

	status.Store(503)
	e.exec(t, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', 'o-1', 'placed', '{"n": 1, "status": "NEW"}')`, tid(1))
	// Several retry budgets spent: the session restarted at least once.
	waitFor(t, "retries against the failing registry", func() bool {
		_, m := in.get("/metrics")
		n, _ := strconv.Atoi(strings.TrimPrefix(metricLine(m, `walbox_schema_registry_requests_total{result="transient",role="value"}`), `walbox_schema_registry_requests_total{result="transient",role="value"} `))
		return n >= 2
	})
	waitFor(t, "/readyz to name the registry", func() bool {
		c, body := in.get("/readyz")
		return c == http.StatusServiceUnavailable && strings.Contains(body, "schema registry unavailable for outbox.event.order-value")
	})
	status.Store(0)
	waitFor(t, "walbox to be ready again", func() bool { c, _ := in.get("/readyz"); return c == 200 })
	recs := consumeNew(t, e.brokers, `^outbox\.event\.order$`, 1)
	if header(recs[0], router.HeaderEventID) != tid(1) {
		t.Fatalf("record %v, want row 1", recs[0])
	}
	if extra := consumeFor(t, e.brokers, `^outbox\.event\.order$`, time.Second); len(extra) != 1 {
		t.Errorf("%d records of row 1, want exactly one", len(extra))
	}

	status.Store(401)
	e.exec(t, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'invoice', 'i-1', 'placed', '{"n": 2, "status": "NEW"}')`, tid(2))
	select {
	case err := <-in.done:
		in.once.Do(func() {}) // stopped by itself; nothing for the cleanup to stop
		if !errors.Is(err, schemareg.ErrRegistryRefused) {
			t.Fatalf("walbox stopped with %v, want a refusal", err)
		}
		for _, w := range []string{`subject "outbox.event.invoice-value"`, "HTTP 401", "credentials", tid(2)} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error %q lacks %q", err, w)
			}
		}
		if n := faults.Load(); n > 100 {
			t.Errorf("%d injected faults: the refusal was retried", n)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("walbox did not stop on a 401")
	}
}

// consumeFor reads the topics matching re for d.
func consumeFor(t *testing.T, brokers []string, re string, d time.Duration) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeRegex(), kgo.ConsumeTopics(re),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for ctx.Err() == nil {
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	return got
}

// TestRunPreEncoded: --value-format pre-encoded sends a bytea payload that
// is already in wire format as it is; one without the magic byte, or
// naming a schema id the registry lacks, is dead-lettered saying so.
func TestRunPreEncoded(t *testing.T) {
	fulltest.Require(t, "pre-encoded values through walbox run; schemareg's tests cover the format in the short run")
	e := newTableEnv(t)
	e.exec(t, `CREATE TABLE public.outbox_bin (LIKE public.outbox INCLUDING DEFAULTS)`)
	e.exec(t, `ALTER TABLE public.outbox_bin ALTER COLUMN payload TYPE bytea USING convert_to(payload::text, 'UTF8')`)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	id, _, err := reg.RegisterSchema("outbox.event.order-value", sr.Schema{Schema: orderAvro})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.Table = "public.outbox_bin"
	cfg.ValueFormat = "pre-encoded"
	cfg.SchemaRegistry.URLs = []string{reg.URL()}
	cfg.InvalidRows, cfg.DeadLetterTopic = "dead-letter", "outbox.dlq"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	in := startInstance(t, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("walbox logs:\n%s", in.logs.Tail(4000))
		}
	})
	waitFor(t, "walbox to be ready", func() bool { c, _ := in.get("/readyz"); return c == 200 })
	good, err := avro.Marshal(avro.MustParse(orderAvro), map[string]any{"n": 5, "status": "PAID"})
	if err != nil {
		t.Fatal(err)
	}
	good = append(schemareg.AppendHeader(nil, uint32(id), nil), good...)
	insert := func(n int, payload []byte) {
		t.Helper()
		e.exec(t, `INSERT INTO public.outbox_bin (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', 'o-1', 'placed', $2)`, tid(n), payload)
	}
	insert(1, good)
	insert(2, []byte(`{"n": 5}`))
	insert(3, schemareg.AppendHeader(nil, 4242, nil))

	rec := consumeNew(t, e.brokers, `^outbox\.event\.order$`, 1)[0]
	if !bytes.Equal(rec.Value, good) || header(rec, router.HeaderEventID) != tid(1) {
		t.Errorf("record %q (event %s), want the bytea as it is", rec.Value, header(rec, router.HeaderEventID))
	}
	dlq := consumeNew(t, e.brokers, `^outbox\.dlq$`, 2)
	for i, want := range []string{"must be in Confluent wire format", "schema id 4242 does not exist in the registry"} {
		if r := header(dlq[i], router.HeaderError); !strings.Contains(r, want) || header(dlq[i], router.HeaderEventID) != tid(i+2) {
			t.Errorf("dead letter %d: %q (event %s), want %q", i, r, header(dlq[i], router.HeaderEventID), want)
		}
	}
}

// TestRunAvroInferred: walbox run --value-schema-source inferred registers
// the schema it derives from each payload under <topic>-value, once per
// distinct shape, sends the record with its id, and dead-letters a payload
// Debezium's expansion fails on (a mixed-type array) with the reason.
func TestRunAvroInferred(t *testing.T) {
	parallel(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	var registrations atomic.Int64
	reg.Intercept(func(_ http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost {
			registrations.Add(1)
		}
		return false
	})
	e := newTableEnv(t)
	insert := func(n int, payload string) {
		t.Helper()
		e.exec(t, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, 'order', 'o-1', 'placed', $2::jsonb)`,
			tid(n), payload)
	}
	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.ValueFormat, cfg.ValueSchema.Source = "avro", "inferred"
	cfg.SchemaRegistry.URLs = []string{reg.URL()}
	cfg.InvalidRows, cfg.DeadLetterTopic = "dead-letter", "outbox.dlq"
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	in := startInstance(t, cfg)
	waitFor(t, "walbox to be ready", func() bool { c, _ := in.get("/readyz"); return c == 200 })
	insert(1, `{"n": 1, "lines": [{"sku": "a"}]}`)
	insert(2, `{"n": 2, "mixed": [1, "x"]}`)
	insert(3, `{"n": 3, "lines": [{"sku": "b"}]}`)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("walbox logs:\n%s", in.logs.Tail(4000))
		}
	})
	recs := consumeNew(t, e.brokers, `^outbox\.event\.order$`, 2)
	if len(recs) != 2 {
		t.Fatalf("%d records, want 2", len(recs))
	}
	admin, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range recs {
		id, body, err := schemareg.ParseHeader(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		s, err := admin.SchemaByID(context.Background(), int(id))
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := avro.Unmarshal(avro.MustParse(s.Schema), body, &got); err != nil {
			t.Fatalf("record %d: %v (schema %s)", i, err, s.Schema)
		}
		if n := got["n"]; n != 1+2*i {
			t.Errorf("record %d decodes to %v, want n = %d", i, got, 1+2*i)
		}
	}
	if n := registrations.Load(); n != 1 {
		t.Errorf("%d registrations for one shape, want 1", n)
	}
	dlq := consumeNew(t, e.brokers, `^outbox\.dlq$`, 1)
	if len(dlq) != 1 || header(dlq[0], router.HeaderEventID) != tid(2) {
		t.Fatalf("dead letters %v, want row 2", dlq)
	}
	reason := header(dlq[0], router.HeaderError)
	for _, w := range []string{"$.mixed[1]", "Field is not a homogenous array", `subject "outbox.event.order-value"`} {
		if !strings.Contains(reason, w) {
			t.Errorf("dead-letter reason %q lacks %q", reason, w)
		}
	}
}
