package pipeline_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/slotctl"
)

// outboxMessage renders ev as the content of an outbox message.
func outboxMessage(ev outboxtest.Event) string {
	content, _ := json.Marshal(map[string]any{
		"id": ev.ID, "aggregate_type": ev.AggregateType, "aggregate_id": ev.AggregateID,
		"event_type": ev.EventType, "payload": json.RawMessage(ev.Payload), "headers": ev.Headers,
	})
	return string(content)
}

// TestStreamingRolledBackSubtransactionMessage: a transactional outbox
// message emitted in a subtransaction that is streamed and then rolled back
// (ROLLBACK TO SAVEPOINT) is not an event, as with protocol version 1.
// Inside a stream the server tags a transactional message with the
// top-level xid, not the subtransaction's, so the xid alone cannot tell it
// was rolled back; the same goes for a message in a nested savepoint.
func TestStreamingRolledBackSubtransactionMessage(t *testing.T) {
	parallel(t)
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		e := startEnvWith(t, time.Second, func(c *pipeline.Config) {
			c.SpoolDir = t.TempDir()
			c.MessagePrefix = "outbox"
		}, pgtest.WithBinDir(v.BinDir), smallWorkMem)
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		n := fulltest.Pick(2_000, 10_000)
		gen := outboxtest.NewGenerator(13, 1)
		keep1, msgKept, msgDropped, dropped, nestedMsg, keep2 := gen.Batch(n), gen.Batch(1), gen.Batch(1), gen.Batch(n), gen.Batch(1), gen.Batch(n)
		// A second transaction, its rolled back messages after the
		// subtransaction's first row: told apart by their position.
		keep3, dropped2, msgDropped2, dropped3, keep4 := gen.Batch(n), gen.Batch(n), gen.Batch(1), gen.Batch(n), gen.Batch(n)
		tx, err := e.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		emit := func(ev outboxtest.Event) func() error {
			return func() error {
				_, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outbox', $1::text)`, outboxMessage(ev))
				return err
			}
		}
		exec := func(sql string) func() error {
			return func() error { _, err := tx.Exec(ctx, sql); return err }
		}
		for _, step := range []func() error{
			func() error { return copyEvents(ctx, tx, keep1) },
			emit(msgKept[0]),
			exec(`SAVEPOINT s`),
			emit(msgDropped[0]),
			exec(`SAVEPOINT inner_s`),
			emit(nestedMsg[0]),
			func() error { return copyEvents(ctx, tx, dropped) }, // streams the messages before the rollback
			exec(`RELEASE SAVEPOINT inner_s`),
			exec(`ROLLBACK TO SAVEPOINT s`),
			func() error { return copyEvents(ctx, tx, keep2) },
			func() error { return tx.Commit(ctx) },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
		written := append(append(append([]outboxtest.Event{}, keep1...), msgKept...), keep2...)
		tx, err = e.conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, step := range []func() error{
			func() error { return copyEvents(ctx, tx, keep3) },
			exec(`SAVEPOINT s2`),
			func() error { return copyEvents(ctx, tx, dropped2) },
			emit(msgDropped2[0]),
			func() error { return copyEvents(ctx, tx, dropped3) }, // streams the message before the rollback
			exec(`ROLLBACK TO SAVEPOINT s2`),
			func() error { return copyEvents(ctx, tx, keep4) },
			func() error { return tx.Commit(ctx) },
		} {
			if err := step(); err != nil {
				t.Fatal(err)
			}
		}
		written = append(append(written, keep3...), keep4...)
		last := gen.Batch(1)
		if err := outboxtest.WriteTx(ctx, e.conn, last); err != nil {
			t.Fatal(err)
		}
		written = append(written, last...)

		consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
		if err != nil {
			t.Fatal(err)
		}
		defer consumer.Close()
		got, err := consumer.ReadUntil(ctx, outboxtest.AllOf(written))
		if err != nil {
			t.Fatalf("consume: %v; %v", err, outboxtest.Check(written, got))
		}
		for _, g := range got {
			if id := g.Headers["event_id"]; id == msgDropped[0].ID || id == nestedMsg[0].ID || id == msgDropped2[0].ID {
				t.Errorf("the message %s of a rolled back subtransaction reached Kafka", id)
			}
		}
		for i, g := range got {
			if i >= len(written) || g.Headers["event_id"] != written[i].ID {
				t.Fatalf("record %d is %s; %d records for %d events", i, g.Headers["event_id"], len(got), len(written))
			}
		}
		if len(got) != len(written) {
			t.Fatalf("%d records for %d events", len(got), len(written))
		}
		if sub := metricSum(t, e.reg, "walbox_streamed_aborts_total"); sub < 2 {
			t.Errorf("walbox_streamed_aborts_total %v: the subtransactions were not streamed before their rollback", sub)
		}
		// The first transaction could not be told apart and came again
		// whole; the second could.
		if n := metricSum(t, e.reg, "walbox_streamed_unstreamed_total"); n != 1 {
			t.Errorf("walbox_streamed_unstreamed_total %v, want 1", n)
		}
	})
}

// TestSpoolCleanedAtStart: a start removes a dead process's spool even if
// no transaction streams to the new one.
func TestSpoolCleanedAtStart(t *testing.T) {
	parallel(t)
	dir := t.TempDir()
	dead := filepath.Join(dir, "walbox-1-dead")
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"lock", "7.spool"} {
		if err := os.WriteFile(filepath.Join(dead, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	e := startEnvWith(t, time.Second, func(c *pipeline.Config) { c.SpoolDir = dir })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ev := outboxtest.NewGenerator(14, 1).Batch(1)
	if err := outboxtest.WriteTx(ctx, e.conn, ev); err != nil {
		t.Fatal(err)
	}
	consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	if _, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return len(got) >= 1 }); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("the dead process's spool is still there after the start: %v", err)
	}
}

// TestStreamingRolledBackSubtransactionMessageExactlyOnce: the same with
// exactly-once, where the transaction sent again whole with protocol
// version 1 arrives once, without the rolled back message.
func TestStreamingRolledBackSubtransactionMessageExactlyOnce(t *testing.T) {
	parallel(t)
	srv := pgtest.Start(t, smallWorkMem)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	scfg := slotctl.Config{Table: "public.outbox", Slot: "eos_stream", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	run := startEOSRelay(t, conn, srv.DSN("postgres"), cluster.ListenAddrs(), "eos_stream", "walbox.state", func(c *pipeline.Config) {
		c.SpoolDir = t.TempDir()
		c.StatusInterval = time.Second
		c.MessagePrefix = "outbox"
		c.TransactionMaxInterval = 200 * time.Millisecond
	})
	n := fulltest.Pick(2_000, 10_000)
	gen := outboxtest.NewGenerator(15, 3)
	keep1, msgDropped, dropped, keep2 := gen.Batch(n), gen.Batch(1), gen.Batch(n), gen.Batch(n)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []func() error{
		func() error { return copyEvents(ctx, tx, keep1) },
		func() error { _, err := tx.Exec(ctx, `SAVEPOINT s`); return err },
		func() error {
			_, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outbox', $1::text)`, outboxMessage(msgDropped[0]))
			return err
		},
		func() error { return copyEvents(ctx, tx, dropped) },
		func() error { _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); return err },
		func() error { return copyEvents(ctx, tx, keep2) },
		func() error { return tx.Commit(ctx) },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	written := append(append([]outboxtest.Event{}, keep1...), keep2...)
	// Once it is committed in Kafka the relay reconnects to stream again:
	// the next large transaction streams.
	waitFor(t, time.Minute, "the reconnect after the transaction sent whole", func() bool {
		return metricSum(t, run.reg, "walbox_postgres_reconnects_total") >= 2
	})
	next := gen.Batch(n)
	if err := outboxtest.WriteTx(ctx, conn, next); err != nil {
		t.Fatal(err)
	}
	written = append(written, next...)
	consumer, err := outboxtest.NewConsumer(cluster.ListenAddrs(), `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return outboxtest.DistinctIDs(got) >= len(written) })
	rep := outboxtest.Check(written, got)
	if err != nil || !rep.OK() || rep.Delivered != len(written) || rep.Duplicates != 0 || len(got) != len(written) {
		t.Fatalf("exactly-once delivery: %v, %d records for %d events (%v)", rep, len(got), len(written), err)
	}
	if err := run.stop(t); err != nil {
		t.Fatal(err)
	}
	if n := metricSum(t, run.reg, "walbox_streamed_unstreamed_total"); n != 1 {
		t.Errorf("walbox_streamed_unstreamed_total %v, want 1", n)
	}
	if n := metricSum(t, run.reg, "walbox_streamed_transactions_total"); n < 1 {
		t.Errorf("walbox_streamed_transactions_total %v: the transaction after the one sent whole did not stream", n)
	}
}
