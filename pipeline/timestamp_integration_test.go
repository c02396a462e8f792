package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// TestRecordTimestampIsTheCommitTime: every record's Kafka timestamp is the
// commit time of its row's transaction (pg_xact_commit_timestamp, in
// Kafka's milliseconds), in both delivery modes and for a transaction large
// enough to stream before its commit (its commit time arrives only with
// Stream Commit). The rows are committed before walbox starts, so a
// timestamp taken when walbox produces is later than the commit: walbox
// used to leave the timestamp to the producer, and every record here failed.
func TestRecordTimestampIsTheCommitTime(t *testing.T) {
	for _, tt := range []struct {
		name string
		eos  bool
	}{{"at-least-once", false}, {"exactly-once", true}} {
		t.Run(tt.name, func(t *testing.T) { testRecordTimestamp(t, tt.eos) })
	}
}

func testRecordTimestamp(t *testing.T, eos bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := pgtest.Start(t, pgtest.WithSetting("track_commit_timestamp", "on"))
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}

	gen := outboxtest.NewGenerator(7, 20)
	var written []outboxtest.Event
	for _, size := range []int{1, 3, 1000, 2, 5} { // 1,000 rows exceed pgtest's 64kB logical_decoding_work_mem
		evs := gen.Batch(size)
		if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
			t.Fatal(err)
		}
		written = append(written, evs...)
	}
	commits := map[string]time.Time{}
	rows, err := conn.Query(ctx, `SELECT id::text, pg_xact_commit_timestamp(xmin) FROM public.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	var newest time.Time
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		commits[id] = at
		if at.After(newest) {
			newest = at
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// walbox starts once the server's clock is past the newest commit, so
	// that a produce-time stamp cannot equal a commit time.
	waitFor(t, 10*time.Second, "the server clock to pass the newest commit", func() bool {
		var past bool
		if err := conn.QueryRow(ctx, `SELECT clock_timestamp() > $1::timestamptz + interval '20 milliseconds'`, newest).Scan(&past); err != nil {
			t.Fatal(err)
		}
		return past
	})

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	reg := prometheus.NewRegistry()
	if eos {
		r := startEOSRelay(t, conn, srv.DSN("postgres"), brokers, "walbox", "walbox.state", func(c *pipeline.Config) {
			c.TransactionMaxInterval, c.StatusInterval = 100*time.Millisecond, time.Second
		})
		defer func() {
			if err := r.stop(t); err != nil {
				t.Errorf("relay: %v", err)
			}
		}()
		reg = r.reg
	} else {
		log := testLogger(t)
		kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: brokers}, log, reg)
		if err != nil {
			t.Fatal(err)
		}
		defer kcl.Close()
		rt, err := router.New(router.Config{})
		if err != nil {
			t.Fatal(err)
		}
		relay, err := pipeline.New(pipeline.Config{ConnString: srv.DSN("postgres"), Slot: "walbox", Publication: "walbox",
			StatusInterval: time.Second, DedupWindow: 10000, MaxInflightRecords: 2000}, kcl, rt, reg, log)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- relay.Run(rctx, pglogrepl.LSN(0)) }()
		defer func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("relay: %v", err)
			}
		}()
	}

	consumer, err := outboxtest.NewConsumer(brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	got, err := consumer.ReadUntil(ctx, func(got []outboxtest.Received) bool { return outboxtest.DistinctIDs(got) >= len(written) })
	if err != nil {
		t.Fatalf("consume: %v", err)
	}
	t.Logf("consumed %d records", len(got))
	if streamed := metricSum(t, reg, "walbox_streamed_transactions_total"); streamed < 1 {
		t.Errorf("walbox_streamed_transactions_total = %v: the 1,000-row transaction did not stream", streamed)
	}
	bad := 0
	for _, r := range got {
		id := r.Headers["event_id"]
		want, ok := commits[id]
		if !ok {
			t.Fatalf("record of unknown event %q", id)
		}
		if want = want.Truncate(time.Millisecond); !r.Timestamp.Equal(want) {
			if bad++; bad <= 5 {
				t.Errorf("event %s: record timestamp %s, want its commit time %s", id, r.Timestamp.UTC().Format(time.RFC3339Nano), want.UTC().Format(time.RFC3339Nano))
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d of %d records do not carry their commit time", bad, len(got))
	}
}
