package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/pipeline"
)

// ambiguousTx starts, on conn, a transaction X whose rolled back
// subtransaction holds an outbox message before its first row: the stream
// cannot tell the message apart (it carries X's xid), so walbox falls back to
// protocol version 1 for X. The rows of the subtransaction make the server
// stream it before the rollback.
func ambiguousTx(t *testing.T, ctx context.Context, conn *pgx.Conn, gen *outboxtest.Generator) pgx.Tx {
	t.Helper()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	msg := gen.Batch(1)
	for _, step := range []func() error{
		func() error { _, err := tx.Exec(ctx, `SAVEPOINT s`); return err },
		func() error {
			_, err := tx.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outbox', $1::text)`, outboxMessage(msg[0]))
			return err
		},
		func() error { return copyEvents(ctx, tx, gen.Batch(2_000)) },
		func() error { _, err := tx.Exec(ctx, `ROLLBACK TO SAVEPOINT s`); return err },
	} {
		if err := step(); err != nil {
			t.Fatal(err)
		}
	}
	return tx
}

// TestStreamingFallbackEndsWithTheTransaction: the protocol version 1
// session walbox falls back to for a transaction X ends at X's end however
// X ends. It failed when only X's Commit ended it: X rolled back, or X empty
// under protocol version 1 (PostgreSQL 15+ sends no Begin nor Commit for
// it), and walbox never streamed again (16 transactions of 2,000 rows over
// 45 s, none streamed). Traffic keeps coming meanwhile; it must not keep
// the fallback on either.
func TestStreamingFallbackEndsWithTheTransaction(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(ctx context.Context, tx pgx.Tx, gen *outboxtest.Generator) error
	}{
		{"rolled back", func(ctx context.Context, tx pgx.Tx, gen *outboxtest.Generator) error {
			// A top-level change after the rollback: walbox falls back
			// while X is still open, then X rolls back.
			if err := copyEvents(ctx, tx, gen.Batch(2_000)); err != nil {
				return err
			}
			return nil
		}},
		{"empty under protocol 1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.end == nil {
				// The same ending as rolled back, seen by the server's
				// status; the short run keeps one of the two.
				fulltest.Require(t, "the empty-transaction fallback case")
			}
			e := startEnvWith(t, 200*time.Millisecond, func(c *pipeline.Config) {
				c.SpoolDir = t.TempDir()
				c.MessagePrefix = "outbox"
			}, smallWorkMem)
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			gen := outboxtest.NewGenerator(31, 4)
			conn2, err := pgx.Connect(ctx, e.srv.DSN("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn2.Close(context.Background())
			tx := ambiguousTx(t, ctx, conn2, gen)
			var written []outboxtest.Event
			// Traffic while X is open.
			small := gen.Batch(10)
			if err := outboxtest.WriteTx(ctx, e.conn, small); err != nil {
				t.Fatal(err)
			}
			written = append(written, small...)
			if tc.end != nil {
				if err := tc.end(ctx, tx, gen); err != nil {
					t.Fatal(err)
				}
				waitMetric(t, ctx, e, "walbox_streamed_unstreamed_total", 1)
				if err := tx.Rollback(ctx); err != nil {
					t.Fatal(err)
				}
			} else {
				if err := tx.Commit(ctx); err != nil {
					t.Fatal(err)
				}
				waitMetric(t, ctx, e, "walbox_streamed_unstreamed_total", 1)
			}
			// Large transactions, with small ones between them, until one
			// streams again.
			deadline := time.Now().Add(90 * time.Second)
			for metricSum(t, e.reg, "walbox_streamed_transactions_total") < 1 {
				if time.Now().After(deadline) {
					t.Fatalf("no transaction streamed within 90 s after X ended (%d events written since): walbox stayed on protocol version 1", len(written))
				}
				for _, n := range []int{2_000, 10} {
					batch := gen.Batch(n)
					if err := outboxtest.WriteTx(ctx, e.conn, batch); err != nil {
						t.Fatal(err)
					}
					written = append(written, batch...)
				}
				time.Sleep(time.Second) // pacing the writer, not synchronisation
			}
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
			got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool {
				for _, g := range got {
					if g.Headers["event_id"] == last[0].ID {
						return true
					}
				}
				return false
			})
			if err != nil {
				t.Fatalf("consume: %v", err)
			}
			if rep := outboxtest.Check(written, got); !rep.OK() || rep.Delivered != len(written) {
				t.Fatalf("delivery: %v, %d records for %d events", rep, len(got), len(written))
			}
			t.Logf("%d events delivered, %v transactions streamed after X", len(written), metricSum(t, e.reg, "walbox_streamed_transactions_total"))
		})
	}
}

// waitMetric waits until the metric's sum reaches at least want.
func waitMetric(t *testing.T, ctx context.Context, e *env, name string, want float64) {
	t.Helper()
	for metricSum(t, e.reg, name) < want {
		if ctx.Err() != nil {
			t.Fatalf("%s stayed at %v, want %v", name, metricSum(t, e.reg, name), want)
		}
		time.Sleep(50 * time.Millisecond) // polling a metric, with the context's deadline
	}
}
