package pipeline_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
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
	parallel(t)
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
			// pg_xact_status and the keepalives that carry the server's
			// position past X, on every version.
			pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
				testFallbackEnds(t, tc.end, pgtest.WithBinDir(v.BinDir))
			})
		})
	}
}

// testFallbackEnds falls back for an ambiguous transaction X, ends X with
// end (nil: commits it, empty under protocol 1; else runs end and rolls X
// back), and writes large transactions until one streams again.
func testFallbackEnds(t *testing.T, end func(ctx context.Context, tx pgx.Tx, gen *outboxtest.Generator) error, opts ...func(*pgtest.Options)) {
	e := startEnvWith(t, 200*time.Millisecond, func(c *pipeline.Config) {
		c.SpoolDir = t.TempDir()
		c.MessagePrefix = "outbox"
	}, append(opts, smallWorkMem)...)
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
	if end != nil {
		if err := end(ctx, tx, gen); err != nil {
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
	got, err := consumer.ReadUntil(ctx, outboxtest.AllOf(written))
	if err != nil {
		t.Fatalf("consume: %v; %v", err, outboxtest.Check(written, got))
	}
	if rep := outboxtest.Check(written, got); !rep.OK() || rep.Delivered != len(written) {
		t.Fatalf("delivery: %v, %d records for %d events", rep, len(got), len(written))
	}
	t.Logf("%d events delivered, %v transactions streamed after X", len(written), metricSum(t, e.reg, "walbox_streamed_transactions_total"))
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

// TestStreamingSpoolFaultFallsBackToProtocol1: a spool that cannot be
// written costs speed, not availability: each streamed transaction it
// cannot hold is sent again with protocol version 1 (one reconnect there,
// one back), counted in walbox_spool_errors_total, and everything is
// delivered. It failed when the spool's syscall.Errno passed for a network
// error: a full 256 KiB tmpfs gave 79 reconnects in 30 s and none of 5,001
// events delivered, the server decoding and streaming the transaction again
// on every cycle.
func TestStreamingSpoolFaultFallsBackToProtocol1(t *testing.T) {
	parallel(t)
	for _, tc := range []struct {
		name string
		dir  func(t *testing.T) string
	}{
		{"not a directory", func(t *testing.T) string {
			// ENOTDIR, for root too (a mode would not stop root).
			file := filepath.Join(t.TempDir(), "file")
			if err := os.WriteFile(file, nil, 0o600); err != nil {
				t.Fatal(err)
			}
			return filepath.Join(file, "spool")
		}},
		{"full disk", func(t *testing.T) string {
			// ENOSPC: a 256 KiB tmpfs, where mounting is allowed.
			fulltest.Require(t, "a full disk under the spool, next to the short run's unwritable path")
			dir := t.TempDir()
			if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
				t.Skipf("cannot mount a small tmpfs here (%v: %s)", err, out)
			}
			t.Cleanup(func() { _ = exec.Command("umount", dir).Run() })
			return dir
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := tc.dir(t)
			e := startEnvWith(t, 200*time.Millisecond, func(c *pipeline.Config) { c.SpoolDir = dir }, smallWorkMem)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			gen := outboxtest.NewGenerator(41, 10)
			var written []outboxtest.Event
			for _, n := range []int{5_000, 10, 5_000, 1} {
				batch := gen.Batch(n)
				if err := outboxtest.WriteTx(ctx, e.conn, batch); err != nil {
					t.Fatal(err)
				}
				written = append(written, batch...)
			}
			consumer, err := outboxtest.NewConsumer(e.brokers, `outbox\.event\..*`)
			if err != nil {
				t.Fatal(err)
			}
			defer consumer.Close()
			got, err := consumer.ReadUntil(ctx, outboxtest.AllOf(written))
			if err != nil {
				t.Fatalf("consume: %v (%d reconnects); %v", err, int(metricSum(t, e.reg, "walbox_postgres_reconnects_total")), outboxtest.Check(written, got))
			}
			if rep := outboxtest.Check(written, got); !rep.OK() || rep.Delivered != len(written) {
				t.Fatalf("delivery: %v, %d records for %d events", rep, len(got), len(written))
			}
			spoolErrs := metricSum(t, e.reg, "walbox_spool_errors_total")
			reconnects := metricSum(t, e.reg, "walbox_postgres_reconnects_total")
			if spoolErrs < 1 {
				t.Errorf("walbox_spool_errors_total = %v, want the spool's failure counted", spoolErrs)
			}
			// Each large transaction: one reconnect to protocol 1, one back.
			if reconnects > 4 {
				t.Errorf("%v reconnects for 2 transactions the spool could not hold, want at most 4", reconnects)
			}
			t.Logf("%d events delivered; %v spool errors, %v reconnects", len(written), spoolErrs, reconnects)
		})
	}
}

// TestReplaySpoolFaultsFallBackToProtocol1: walbox replay handles what makes
// walbox run fall back to protocol version 1 the same way, on the same
// connection (its temporary slot goes with the connection, not with the
// stream): a transaction larger than --spool-max-bytes, a spool that cannot
// be written, and a rolled back subtransaction's message the stream cannot
// attribute. Each used to end the replay with an error (the last asking for
// --streaming=false). Every event of the range is replayed, once.
func TestReplaySpoolFaultsFallBackToProtocol1(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := pgtest.Start(t, smallWorkMem)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	setupReplaySource(ctx, t, conn)
	gen := outboxtest.NewGenerator(43, 10)
	var want []outboxtest.Event
	// Too large for the 512 KiB spool, then one that fits.
	for _, n := range []int{10_000, 1_000} {
		batch := gen.Batch(n)
		if err := outboxtest.WriteTx(ctx, conn, batch); err != nil {
			t.Fatal(err)
		}
		want = append(want, batch...)
	}
	// Ambiguous, then a small one.
	tx := ambiguousTx(t, ctx, conn, gen)
	keep := gen.Batch(1_000)
	if err := copyEvents(ctx, tx, keep); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	last := gen.Batch(1)
	if err := outboxtest.WriteTx(ctx, conn, last); err != nil {
		t.Fatal(err)
	}
	want = append(append(want, keep...), last...)
	commits := commitLSNs(ctx, t, conn)
	if len(commits) != 4 {
		t.Fatalf("found %d commits, want 4", len(commits))
	}
	if _, err := conn.Exec(ctx, `SELECT pg_drop_replication_slot('peek')`); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		dir      string
		maxBytes int64
		streamed int
	}{
		{"spool full", t.TempDir(), 512 << 10, 1},
		{"spool not a directory", filepath.Join(notDir, "spool"), 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &ackingProducer{}
			res, err := pipeline.Replay(ctx, pipeline.ReplayConfig{
				ConnString: srv.DSN("postgres"), Publication: "walbox", Slot: "walbox_replay", Tables: []string{"public.outbox"},
				MessagePrefix: "outbox",
				Range:         pipeline.Range{FromLSN: commits[0], ToLSN: commits[3]}, From: commits[0].String(), StatusInterval: 50 * time.Millisecond,
				SpoolDir: tc.dir, SpoolMaxBytes: tc.maxBytes,
			}, p, rt, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range p.recs {
				for _, h := range r.Headers {
					if h.Key == "event_id" {
						got = append(got, string(h.Value))
					}
				}
			}
			var wantIDs []string
			for _, ev := range want {
				wantIDs = append(wantIDs, ev.ID)
			}
			if fmt.Sprint(got) != fmt.Sprint(wantIDs) {
				t.Fatalf("replayed %d events, want %d in commit order", len(got), len(wantIDs))
			}
			if res.Streamed < tc.streamed {
				t.Errorf("%d transactions streamed, want at least %d (streaming again after the fallback)", res.Streamed, tc.streamed)
			}
			t.Logf("replayed %d events, %d transactions streamed", len(got), res.Streamed)
		})
	}
}
