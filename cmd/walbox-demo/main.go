// Command walbox-demo runs the whole pipeline on one machine with no setup:
// a throwaway Postgres (initdb into a temp dir), an embedded Kafka-protocol
// broker (kfake), the outbox table from migrations/, and walbox's relay. It
// writes a few orders, each with its outbox event in the same transaction,
// and prints every record as a consumer receives it, with the measured
// insert-to-ack and insert-to-consume latency.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"golang.org/x/sync/errgroup"

	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

func main() {
	orders := flag.Int("orders", 5, "number of sample orders to write")
	verbose := flag.Bool("v", false, "show walbox's own log")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *orders, *verbose, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "walbox-demo: %v\n", err)
		os.Exit(1)
	}
}

// ackTimes wraps the Kafka client to note when each event is acknowledged.
type ackTimes struct {
	pipeline.Producer
	mu   sync.Mutex
	acks map[string]time.Time
}

func (a *ackTimes) Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	a.Producer.Produce(ctx, r, func(r *kgo.Record, err error) {
		if err == nil {
			for _, h := range r.Headers {
				if h.Key == router.HeaderEventID {
					a.mu.Lock()
					a.acks[string(h.Value)] = time.Now()
					a.mu.Unlock()
				}
			}
		}
		promise(r, err)
	})
}

func (a *ackTimes) get(id string) (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.acks[id]
	return t, ok
}

func run(ctx context.Context, orders int, verbose bool, out io.Writer) error {
	logOut := io.Discard
	if verbose {
		logOut = os.Stderr
	}
	log := slog.New(slog.NewTextHandler(logOut, nil))

	fmt.Fprintln(out, "starting a throwaway PostgreSQL (initdb, wal_level=logical) ...")
	pg, err := pgtest.StartServer(ctx, pgtest.Options{})
	if err != nil {
		return fmt.Errorf("start postgres: %w (install the PostgreSQL server, e.g. apt-get install postgresql, or set PG_BIN)", err)
	}
	defer pg.Close()
	fmt.Fprintf(out, "  postgres %d on 127.0.0.1:%d\n", pg.MajorVersion(), pg.Port())

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(3))
	if err != nil {
		return fmt.Errorf("start embedded kafka: %w", err)
	}
	defer cluster.Close()
	brokers := cluster.ListenAddrs()
	fmt.Fprintf(out, "  embedded Kafka-protocol broker (kfake) on %s\n", strings.Join(brokers, ","))

	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, f := range []string{"001_outbox.sql", "002_publication.sql"} {
		sql, err := migrations.FS.ReadFile(f)
		if err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			return fmt.Errorf("apply migrations/%s: %w", f, err)
		}
		fmt.Fprintf(out, "  applied migrations/%s\n", f)
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE orders (id text PRIMARY KEY, customer text NOT NULL, total_cents int NOT NULL)`); err != nil {
		return err
	}
	_, slot, err := slotctl.Ensure(ctx, conn, slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "  slot %q created at %s\n\n", slot.Name, slot.ConfirmedFlushLSN)

	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: brokers, MaxBufferedRecords: 10001}, log, nil)
	if err != nil {
		return err
	}
	defer kcl.Close()
	acks := &ackTimes{Producer: kcl, acks: map[string]time.Time{}}
	rt, err := router.New(router.Config{})
	if err != nil {
		return err
	}
	relay, err := pipeline.New(pipeline.Config{
		ConnString: pg.DSN("postgres"), Slot: "walbox", Publication: "walbox", Tables: []string{"public.outbox"},
		StatusInterval: 200 * time.Millisecond,
	}, acks, rt, prometheus.NewRegistry(), log)
	if err != nil {
		return err
	}
	rctx, stopRelay := context.WithCancel(ctx)
	var g errgroup.Group
	g.Go(func() error { return relay.Run(rctx, slot.ConfirmedFlushLSN) })
	defer func() { stopRelay(); _ = g.Wait() }()

	consumer, err := outboxtest.NewConsumer(brokers, `outbox\.event\..*`)
	if err != nil {
		return err
	}
	defer consumer.Close()

	// Wait until the relay streams, so the latencies below are the
	// pipeline's and not its start-up.
	for !relay.Streaming() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "writing %d orders one by one, each with its OrderPlaced event in the same transaction,\nand waiting for the consumer to receive each ...\n\n", orders)
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	var consumeLat, ackLat []time.Duration
	for i := 1; i <= orders; i++ {
		// Latency is measured from the start of the writing transaction:
		// the commit's reply can reach this client after walbox has
		// already read the commit from the WAL and Kafka has acked it.
		c := time.Now()
		id, err := placeOrder(wctx, conn, i)
		if err != nil {
			return err
		}
		var r *outboxtest.Received
		for r == nil {
			recs, err := consumer.Poll(wctx)
			if err != nil {
				return err
			}
			if wctx.Err() != nil {
				return fmt.Errorf("event %s of order %d did not arrive within 60s", id, i)
			}
			for j := range recs {
				if recs[j].Headers["event_id"] == id {
					r = &recs[j]
				}
			}
		}
		fmt.Fprintf(out, "record %d  topic=%s partition=%d offset=%d\n  key     %s\n", i, r.Topic, r.Partition, r.Offset, r.Key)
		keys := make([]string, 0, len(r.Headers))
		for k := range r.Headers {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			fmt.Fprintf(out, "  header  %s=%s\n", k, r.Headers[k])
		}
		fmt.Fprintf(out, "  value   %s\n", r.Value)
		// The consumer can see a record a moment before the producer's
		// callback for it has run; give the callback a second.
		at, ok := acks.get(id)
		for deadline := time.Now().Add(time.Second); !ok && time.Now().Before(deadline); at, ok = acks.get(id) {
			time.Sleep(time.Millisecond)
		}
		if ok {
			ackLat = append(ackLat, at.Sub(c))
			consumeLat = append(consumeLat, r.At.Sub(c))
			note := ""
			if i == 1 {
				note = " (first record: includes creating the topic)"
			}
			fmt.Fprintf(out, "  latency insert->kafka ack %s, insert->consumer %s%s\n\n", fmtDur(at.Sub(c)), fmtDur(r.At.Sub(c)), note)
		}
	}
	fmt.Fprintf(out, "all %d events delivered; median insert->ack %s, median insert->consumer %s\n",
		orders, fmtDur(median(ackLat)), fmtDur(median(consumeLat)))
	stopRelay()
	if err := g.Wait(); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	var confirmed string
	if err := conn.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&confirmed); err != nil {
		return err
	}
	fmt.Fprintf(out, "slot confirmed up to %s after a clean stop; outbox rows were never updated\n", confirmed)
	return nil
}

// placeOrder writes the business row and its event in one transaction:
// the transactional outbox.
func placeOrder(ctx context.Context, conn *pgx.Conn, n int) (eventID string, err error) {
	orderID := fmt.Sprintf("ord-%04d", n)
	customer := []string{"ada", "grace", "linus"}[n%3]
	total := 1000 + 250*n
	payload, _ := json.Marshal(map[string]any{"order_id": orderID, "customer": customer, "total_cents": total})
	headers, _ := json.Marshal(map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", n, n), "correlation_id": "demo-" + orderID})
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `INSERT INTO orders (id, customer, total_cents) VALUES ($1, $2, $3)`, orderID, customer, total); err != nil {
			return err
		}
		return tx.QueryRow(ctx, `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload, headers)
			VALUES ('order', $1, 'OrderPlaced', $2, $3) RETURNING id::text`, orderID, string(payload), string(headers)).Scan(&eventID)
	})
	return eventID, err
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func fmtDur(d time.Duration) string {
	return fmt.Sprintf("%.2fms", float64(d.Microseconds())/1000)
}
