package pipeline_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/slotctl"
)

// historyDB is one throwaway cluster with the outbox table, the
// publication and slot, and its first transactions written.
type historyDB struct {
	srv      *pgtest.Server
	conn     *pgx.Conn
	written  []outboxtest.Event
	systemID string
}

func newHistoryDB(t *testing.T, ctx context.Context, slot, aggType string, padWAL bool) *historyDB {
	t.Helper()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	if padWAL {
		// Move this cluster's WAL well ahead of a fresh one's, as a
		// database that has lived for a while is.
		for range 3 {
			if _, err := conn.Exec(ctx, `CREATE TABLE IF NOT EXISTS pad(); DROP TABLE pad; SELECT pg_switch_wal()`); err != nil {
				t.Fatal(err)
			}
		}
	}
	scfg := slotctl.Config{Table: "public.outbox", Slot: slot, Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	db := &historyDB{srv: srv, conn: conn}
	if err := conn.QueryRow(ctx, `SELECT system_identifier::text FROM pg_control_system()`).Scan(&db.systemID); err != nil {
		t.Fatal(err)
	}
	gen := outboxtest.NewGenerator(uint64(len(aggType)), 3, aggType)
	for range 3 {
		evs := gen.Batch(2)
		if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
			t.Fatal(err)
		}
		db.written = append(db.written, evs...)
	}
	return db
}

func (db *historyDB) confirmed(t *testing.T, ctx context.Context, slot string) pglogrepl.LSN {
	t.Helper()
	var lsn pglogrepl.LSN
	if err := db.conn.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// expectRefusal starts an exactly-once relay on db's slot and wants it to
// stop at once with ErrHistoryMismatch naming every string of want, the
// slot not moved. It returns the error text.
func expectRefusal(t *testing.T, ctx context.Context, db *historyDB, slot string, brokers []string, stateTopic string, want ...string) string {
	t.Helper()
	before := db.confirmed(t, ctx, slot)
	run := startEOSRelay(t, db.conn, db.srv.DSN("postgres"), brokers, slot, stateTopic, nil)
	var runErr error
	select {
	case runErr = <-run.done:
	case <-time.After(30 * time.Second):
		run.cancel()
		<-run.done
		consumer, err := outboxtest.NewConsumer(brokers, `outbox\.event\..*`)
		if err != nil {
			t.Fatal(err)
		}
		defer consumer.Close()
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		got, _ := consumer.Poll(pctx)
		pcancel()
		t.Fatalf("the relay kept running on a position of another history; report of this cluster's events: %v", outboxtest.Check(db.written, got))
	}
	if !errors.Is(runErr, pipeline.ErrHistoryMismatch) {
		t.Fatalf("relay ended with %v, want ErrHistoryMismatch", runErr)
	}
	msg := runErr.Error()
	for _, w := range append(want, "--transactional-id", stateTopic) {
		if !strings.Contains(msg, w) {
			t.Errorf("the refusal does not name %q: %s", w, msg)
		}
	}
	if after := db.confirmed(t, ctx, slot); after != before {
		t.Errorf("the slot moved from %s to %s: it confirmed past transactions it did not produce", before, after)
	}
	return msg
}

// seedState commits value under key to the state topic as a walbox would.
func seedState(t *testing.T, ctx context.Context, brokers []string, topic, key, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("seed-"+key), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, topic); err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: []byte(key), Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
}

// TestRelayExactlyOnceRefusesAnotherDatabaseHistory: a brand-new cluster
// with the same slot name streams to the same Kafka and state topic as an
// old one did. The state topic's position is the old cluster's, ahead of
// everything the new one wrote: skipping by it used to drop the new
// cluster's first transactions (never produced, the slot confirmed past
// them). The relay must refuse to start, naming both histories, and confirm
// nothing. The short run seeds the old cluster's record (in today's form
// and in the form of a walbox that did not record the history); the full
// run also streams from a real old cluster first.
func TestRelayExactlyOnceRefusesAnotherDatabaseHistory(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	const stateTopic = "walbox.state"

	t.Run("seeded records", func(t *testing.T) {
		const other, older = "eos_hist_other", "eos_hist_older"
		db := newHistoryDB(t, ctx, other, "histseed", false)
		scfg := slotctl.Config{Table: "public.outbox", Slot: older, Publication: "walbox", CreateMissing: true}
		if _, err := slotctl.EnsureSlot(ctx, db.conn, scfg); err != nil {
			t.Fatal(err)
		}
		seedState(t, ctx, brokers, stateTopic, pipeline.TransactionalIDFor(other),
			`{"slot":"eos_hist_other","commit_lsn":"5/0","end_lsn":"5/10","records":3,"system_id":"7000000000000000042","timeline":1,"database":"postgres"}`)
		expectRefusal(t, ctx, db, other, brokers, stateTopic, "7000000000000000042", db.systemID, "system identifiers differ")
		// Written by a walbox that did not record the history: trusted
		// only if it could be of this database.
		seedState(t, ctx, brokers, stateTopic, pipeline.TransactionalIDFor(older),
			`{"slot":"eos_hist_older","commit_lsn":"5/0","end_lsn":"5/10","records":3}`)
		expectRefusal(t, ctx, db, older, brokers, stateTopic, db.systemID, "beyond the server's WAL")
	})

	t.Run("a new cluster after an old one", func(t *testing.T) {
		fulltest.Require(t, "two clusters; the short run seeds the old cluster's record")
		const slot = "eos_history"
		old := newHistoryDB(t, ctx, slot, "histold", true)
		first := startEOSRelay(t, old.conn, old.srv.DSN("postgres"), brokers, slot, stateTopic, func(c *pipeline.Config) {
			c.TransactionMaxInterval = 10 * time.Millisecond
		})
		consumer, err := outboxtest.NewConsumer(brokers, `outbox\.event\.histold`)
		if err != nil {
			t.Fatal(err)
		}
		defer consumer.Close()
		if _, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return len(got) >= len(old.written) }); err != nil {
			t.Fatalf("the old cluster's events: %v", err)
		}
		if err := first.stop(t); err != nil {
			t.Fatal(err)
		}
		fresh := newHistoryDB(t, ctx, slot, "histnew", false)
		expectRefusal(t, ctx, fresh, slot, brokers, stateTopic, old.systemID, fresh.systemID)
	})
}
