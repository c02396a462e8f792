package pipeline_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
)

// metricValue returns the value of the counter or gauge name (with the
// given label pairs) gathered from reg, or -1 when there is none.
func metricValue(t *testing.T, reg prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					found = found || (l.GetName() == labels[i] && l.GetValue() == labels[i+1])
				}
				if !found {
					continue metric
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	return -1
}

// terminateWalsender drops walbox's replication connection from the server
// side, as a server restart, a failover or a network cut would, and waits
// until the relay has reconnected.
func (e *env) terminateWalsender(t *testing.T, ctx context.Context) {
	t.Helper()
	before := metricValue(t, e.reg, "walbox_postgres_reconnects_total")
	var terminated bool
	if err := e.conn.QueryRow(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL`,
		e.slotName).Scan(&terminated); err != nil || !terminated {
		t.Fatalf("terminate the walsender: %v (terminated %v)", err, terminated)
	}
	waitFor(t, 30*time.Second, "the relay to reconnect", func() bool {
		var active bool
		if err := e.conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, e.slotName).Scan(&active); err != nil {
			t.Fatal(err)
		}
		return active && metricValue(t, e.reg, "walbox_postgres_reconnects_total") > before
	})
}

// readUntil consumes until done or timeout, failing the test on timeout.
func readUntil(t *testing.T, c *outboxtest.Consumer, timeout time.Duration, what string, done func([]outboxtest.Received) bool) []outboxtest.Received {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	got, err := c.ReadUntil(ctx, done)
	if err != nil {
		t.Fatalf("waiting %s for %s: %v (got %d records)", timeout, what, err, len(got))
	}
	return got
}

// outboxSharedIDs is an outbox whose event id is not unique: one event sent
// to two topics, or a writer bug, gives two rows with one id.
const outboxSharedIDs = `CREATE TABLE public.outbox (
    seq            bigserial PRIMARY KEY,
    id             text  NOT NULL,
    aggregate_type text  NOT NULL,
    aggregate_id   text  NOT NULL,
    event_type     text  NOT NULL,
    payload        jsonb NOT NULL,
    headers        jsonb NOT NULL DEFAULT '{}'
)`

// TestRelayReplayKeepsRowsSharingAnEventID: two rows with the same event id,
// in adjacent transactions, with the replication connection dropped between
// the first one's ack and the second one's arrival. Both must arrive.
//
// How it broke: dedup remembered event ids, and after the reconnect skipped
// any row with a remembered id at or below the WAL received before it. The
// second row is written (its WAL position) before the first transaction
// commits, so it counted as a replay, matched the first row's id, was
// skipped, and its transaction was confirmed: the event was lost. The replay
// set is now keyed on (commit LSN, position in the transaction) and bounded
// by commit LSNs, so a transaction never received is never skipped.
func TestRelayReplayKeepsRowsSharingAnEventID(t *testing.T) {
	parallel(t)
	e := startEnvDDL(t, outboxSharedIDs, 200*time.Millisecond, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	const insert = `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ('dup', 'order', 'o-1', $1, '{}')`
	first, err := e.conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, insert, "first"); err != nil {
		t.Fatal(err)
	}
	conn2, err := pgx.Connect(ctx, e.srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn2.Close(ctx)
	second, err := conn2.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := second.Exec(ctx, insert, "second"); err != nil {
		t.Fatal(err)
	}
	if err := first.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	has := func(got []outboxtest.Received, eventType string) bool {
		for _, r := range got {
			if r.Headers["event_id"] == "dup" && r.Headers["event_type"] == eventType {
				return true
			}
		}
		return false
	}
	got := readUntil(t, consumer, 30*time.Second, "the first row", func(got []outboxtest.Received) bool { return has(got, "first") })

	e.terminateWalsender(t, ctx)
	if err := second.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	got = append(got, readUntil(t, consumer, 20*time.Second, "the second row with the same event id", func(r []outboxtest.Received) bool {
		return has(append(got, r...), "second")
	})...)
	if n := metricValue(t, e.reg, "walbox_events_duplicate_skipped_total"); n > 1 {
		t.Errorf("walbox_events_duplicate_skipped_total = %v, want at most 1 (the first row, if it was replayed)", n)
	}
}

// TestRelaySurvivesLargeForeignTransaction: while the walsender decodes a
// large transaction of a table outside the publication it sends nothing but
// a keepalive every wal_sender_timeout/2, at best. The relay must not give
// the connection up in between, or it reconnects, the server decodes the
// same transaction again, and the slot never passes it.
//
// How it broke: --pg-receive-timeout (1s here) was taken as is; the walsender
// is silent longer than that while it works through the transaction, so the
// relay reconnected forever and the events after the transaction never
// arrived. The receive timeout is now raised to the server's
// wal_sender_timeout (4s here), and replies are requested often enough that
// the server's answers arrive well within it.
func TestRelaySurvivesLargeForeignTransaction(t *testing.T) {
	// Sized so the server needs clearly more than the 1s receive timeout to
	// decode the UPDATE on a loaded 2-core machine (measured: see the log).
	const rows = 1_000_000
	ddl := outboxtest.DDL + `;
CREATE TABLE public.big (id int PRIMARY KEY, v int NOT NULL, pad text NOT NULL);
INSERT INTO public.big SELECT g, 0, repeat('x', 100) FROM generate_series(1, ` + itoa(rows) + `) g`
	e := startEnvDDL(t, ddl, 200*time.Millisecond, func(c *pipeline.Config) { c.ReceiveTimeout = time.Second },
		func(o *pgtest.Options) { o.Settings = map[string]string{"wal_sender_timeout": "4s"} })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()

	start := time.Now()
	if _, err := e.conn.Exec(ctx, `UPDATE public.big SET v = v + 1`); err != nil {
		t.Fatal(err)
	}
	t.Logf("UPDATE of %d rows took %s", rows, time.Since(start).Round(time.Millisecond))
	evs := outboxtest.NewGenerator(3, 5).Batch(10)
	if err := outboxtest.WriteTx(ctx, e.conn, evs); err != nil {
		t.Fatal(err)
	}
	committed := time.Now()
	got := readUntil(t, consumer, 90*time.Second, "the events committed after the large transaction", func(got []outboxtest.Received) bool {
		return outboxtest.DistinctIDs(got) >= len(evs)
	})
	t.Logf("events arrived %s after their commit (the server decoded the large transaction first)", time.Since(committed).Round(time.Millisecond))
	if rep := outboxtest.Check(evs, got); !rep.OK() {
		t.Fatalf("delivery: %v", rep)
	}
	if n := metricValue(t, e.reg, "walbox_postgres_reconnects_total"); n != 0 {
		t.Fatalf("walbox_postgres_reconnects_total = %v, want 0: the relay gave up a live connection while the server decoded", n)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// TestRelayNonTransactionalMessage: a message with the outbox prefix emitted
// outside a transaction (pg_logical_emit_message(false, ...)) has no commit
// to confirm at. It is dead-lettered when a dead-letter topic is set and
// skipped otherwise, with a metric and a warning; the events after it flow
// and the slot is confirmed past it.
//
// How it broke: the relay stopped with an error, and since the slot could
// not be confirmed past the message, every restart stopped at it again.
func TestRelayNonTransactionalMessage(t *testing.T) {
	parallel(t)
	for _, tt := range []struct {
		name       string
		deadLetter string
	}{
		{name: "skipped without a dead-letter topic"},
		{name: "dead-lettered", deadLetter: "outbox.dlq"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnvWith(t, 200*time.Millisecond, func(c *pipeline.Config) {
				c.MessagePrefix = "outbox"
				c.DeadLetterTopic = tt.deadLetter
			})
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\..*`)
			if err != nil {
				t.Fatal(err)
			}
			defer consumer.Close()
			content := `{"id":"nt-1","aggregate_type":"order","aggregate_id":"o-1","event_type":"created","payload":{}}`
			var msgLSN pglogrepl.LSN
			if err := e.conn.QueryRow(ctx, `SELECT pg_logical_emit_message(false, 'outbox', $1::text)`, content).Scan(&msgLSN); err != nil {
				t.Fatal(err)
			}
			evs := outboxtest.NewGenerator(4, 5).Batch(5)
			if err := outboxtest.WriteTx(ctx, e.conn, evs); err != nil {
				t.Fatal(err)
			}
			got := readUntil(t, consumer, 20*time.Second, "the events after the message", func(got []outboxtest.Received) bool {
				n := 0
				for _, r := range got {
					if r.Topic != tt.deadLetter {
						n++
					}
				}
				return n >= len(evs) && (tt.deadLetter == "" || len(got) > n)
			})
			var dl []outboxtest.Received
			for _, r := range got {
				if r.Topic == tt.deadLetter {
					dl = append(dl, r)
				}
			}
			if tt.deadLetter != "" {
				if len(dl) != 1 || string(dl[0].Value) != content || dl[0].Headers[router.HeaderTable] != "pg_logical_emit_message.outbox" ||
					dl[0].Headers[router.HeaderLSN] != msgLSN.String() {
					t.Fatalf("dead-letter records %+v, want one with the message %s at %s", dl, content, msgLSN)
				}
				waitFor(t, 10*time.Second, "walbox_events_dead_lettered_total to count it", func() bool {
					return metricValue(t, e.reg, "walbox_events_dead_lettered_total") == 1
				})
			} else if n := metricValue(t, e.reg, "walbox_messages_skipped_total", "reason", "non_transactional"); n != 1 {
				t.Fatalf("walbox_messages_skipped_total{reason=non_transactional} = %v, want 1", n)
			}
			waitFor(t, 10*time.Second, "the slot to be confirmed past the message", func() bool {
				return e.confirmedFlush(t) > msgLSN
			})
		})
	}
}

// TestRelayRoutesOnlyTheOutboxTables: a table added to the publication
// later (FOR ALL TABLES, or by hand) must not have its rows routed as
// events; they are counted and the relay carries on.
//
// How it broke: nothing checked the relation of an insert. A second table
// shaped like the outbox had its rows published as events (one with another
// shape stopped the relay as an invalid row). Config.Tables now names the
// outbox; with it unset (the old behaviour) the foreign rows arrive and the
// "routed" subtest shows it.
func TestRelayRoutesOnlyTheOutboxTables(t *testing.T) {
	parallel(t)
	ddl := outboxtest.DDL + `;
CREATE TABLE public.audit (LIKE public.outbox INCLUDING DEFAULTS)`
	for _, tt := range []struct {
		name        string
		tables      []string
		wantForeign bool
	}{
		{name: "not routed", tables: []string{"public.outbox"}},
		{name: "routed without Tables, as before", wantForeign: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			e := startEnvDDL(t, ddl, 200*time.Millisecond, func(c *pipeline.Config) { c.Tables = tt.tables })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if _, err := e.conn.Exec(ctx, `ALTER PUBLICATION walbox ADD TABLE public.audit`); err != nil {
				t.Fatal(err)
			}
			consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
			if err != nil {
				t.Fatal(err)
			}
			defer consumer.Close()
			gen := outboxtest.NewGenerator(6, 5)
			before, foreign, after := gen.Batch(3), gen.Batch(4), gen.Batch(3)
			if err := outboxtest.WriteTx(ctx, e.conn, before); err != nil {
				t.Fatal(err)
			}
			tx, err := e.conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			for _, ev := range foreign {
				h, _ := json.Marshal(ev.Headers)
				if _, err := tx.Exec(ctx, `INSERT INTO public.audit (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)`,
					ev.ID, ev.AggregateType, ev.AggregateID, ev.EventType, string(ev.Payload), string(h)); err != nil {
					t.Fatal(err)
				}
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := outboxtest.WriteTx(ctx, e.conn, after); err != nil {
				t.Fatal(err)
			}
			want := append(append([]outboxtest.Event(nil), before...), after...)
			if tt.wantForeign {
				want = append(want, foreign...)
			}
			got := readUntil(t, consumer, 20*time.Second, "the outbox events", func(got []outboxtest.Received) bool {
				return outboxtest.DistinctIDs(got) >= len(want)
			})
			// The last outbox transaction was committed after the foreign
			// one, so once its events arrived, foreign events would have.
			ids := map[string]bool{}
			for _, r := range got {
				ids[r.Headers["event_id"]] = true
			}
			for _, ev := range foreign {
				if ids[ev.ID] != tt.wantForeign {
					t.Errorf("foreign row %s delivered = %v, want %v", ev.ID, ids[ev.ID], tt.wantForeign)
				}
			}
			wantCount := float64(len(foreign))
			if tt.wantForeign {
				wantCount = 0
			}
			if n := metricValue(t, e.reg, "walbox_foreign_changes_total"); n != wantCount {
				t.Errorf("walbox_foreign_changes_total = %v, want %v", n, wantCount)
			}
		})
	}
}

// TestRelayDecidesOversizedRecordsInOrder: a record larger than its topic's
// max.message.bytes, followed by records of the same key. Under fail, the
// relay stops before it, with the records before it confirmed and none
// after it in Kafka; under the dead-letter policy its dead letter takes its
// place and the rest follows.
//
// How it broke: the record was produced and refused by Kafka after the
// fact, while the later records of its key were produced and acknowledged;
// after the fix and a restart the key read R2 R3 R1 R2 R3.
func TestRelayDecidesOversizedRecordsInOrder(t *testing.T) {
	parallel(t)
	for _, tt := range []struct {
		name       string
		deadLetter string
		realBroker bool
	}{
		{name: "fail"},
		{name: "dead-letter", deadLetter: "outbox.dlq"},
		// One check that a real broker's DescribeConfigs answer is read
		// as kfake's is, and that it refuses what walbox refuses.
		{name: "fail on a real broker", realBroker: true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var brokers []string
			aggType := "order"
			if tt.realBroker {
				brokers = kafkatest.Start(t).Addrs()
				// Unique, in case KAFKA_BROKERS names a long-lived cluster.
				aggType = "order" + strconv.FormatInt(time.Now().UnixNano(), 36)
			}
			topic := "outbox.event." + aggType
			e := startEnvKafka(t, brokers, outboxtest.DDL, 200*time.Millisecond, func(c *pipeline.Config) { c.DeadLetterTopic = tt.deadLetter })
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			adm := newAdmin(t, e.brokers)
			limit := "2000"
			if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, topic); err != nil {
				t.Fatal(err)
			}
			gen := outboxtest.NewGenerator(8, 1, "created")
			evs := gen.Batch(4)
			for i := range evs {
				evs[i].AggregateType = aggType
			}
			// Incompressible, so that Kafka refuses it too (franz-go
			// compresses batches; walbox checks sizes before compression).
			pad := make([]byte, 1500)
			_, _ = rand.Read(pad)
			evs[1].Payload = []byte(`{"pad":"` + hex.EncodeToString(pad) + `"}`)
			for _, ev := range evs {
				if err := outboxtest.WriteTx(ctx, e.conn, []outboxtest.Event{ev}); err != nil {
					t.Fatal(err)
				}
			}
			consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\..*`)
			if err != nil {
				t.Fatal(err)
			}
			defer consumer.Close()
			if tt.deadLetter == "" {
				var runErr error
				select {
				case runErr = <-e.done:
				case <-ctx.Done():
					t.Fatal("the relay did not stop at the oversized record")
				}
				for _, want := range []string{evs[1].ID, topic, "over the limit of 2000 bytes", "max.message.bytes"} {
					if runErr == nil || !strings.Contains(runErr.Error(), want) {
						t.Errorf("error %v does not name %q", runErr, want)
					}
				}
				ends, err := adm.ListEndOffsets(ctx, topic)
				if err != nil {
					t.Fatal(err)
				}
				if o, _ := ends.Lookup(topic, 0); o.Offset != 1 {
					t.Fatalf("the topic holds %d records, want 1: only the one before the oversized record", o.Offset)
				}
				return
			}
			got := readUntil(t, consumer, 20*time.Second, "the events and the dead letter", func(got []outboxtest.Received) bool { return len(got) >= 4 })
			var order []string
			for _, r := range got {
				if r.Topic == tt.deadLetter {
					if r.Headers["event_id"] != evs[1].ID || len(r.Value) != 0 {
						t.Fatalf("dead letter %+v, want event %s without its value", r.Headers, evs[1].ID)
					}
					continue
				}
				order = append(order, r.Headers["event_id"])
			}
			if want := []string{evs[0].ID, evs[2].ID, evs[3].ID}; strings.Join(order, " ") != strings.Join(want, " ") {
				t.Fatalf("topic order %v, want %v", order, want)
			}
		})
	}
}

func newAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// TestRelayBatchesWithinTopicLimit: a topic whose max.message.bytes is
// below the producer's batch limit receives many small records of one key
// at once. Each fits; their batch must fit too.
//
// How it broke: franz-go filled batches up to --producer-batch-max-bytes
// (1 MB), the broker refused the batch as too large, and the relay stopped
// with advice to lower the flag for every topic. The topic limits walbox
// looks up now cap each topic's batches (kgo.ProducerBatchMaxBytesFn).
func TestRelayBatchesWithinTopicLimit(t *testing.T) {
	e := startEnvWith(t, 200*time.Millisecond, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	limit := "2000"
	if _, err := newAdmin(t, e.brokers).CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &limit}, "outbox.event.order"); err != nil {
		t.Fatal(err)
	}
	var evs []outboxtest.Event
	gen := outboxtest.NewGenerator(10, 1)
	for _, ev := range gen.Batch(200) {
		ev.AggregateType = "order"
		evs = append(evs, ev)
	}
	if err := outboxtest.WriteTx(ctx, e.conn, evs); err != nil {
		t.Fatal(err)
	}
	consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got := readUntil(t, consumer, 20*time.Second, "every event", func(got []outboxtest.Received) bool { return outboxtest.DistinctIDs(got) >= len(evs) })
	if rep := outboxtest.Check(evs, got); !rep.OK() {
		t.Fatalf("delivery: %v", rep)
	}
}
