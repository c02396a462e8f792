package inbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"log"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
)

// A billing service applies OrderPlaced events to its own database once
// each: the balance update and the inbox row commit together, and the Kafka
// offset is committed only after them. Kafka may deliver a record again
// (a crash before the offset commit, a rebalance, walbox's at-least-once
// mode); the inbox skips it. (Compiled, not run: it needs a database and a
// broker.)
func Example() {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, "postgres://billing@db/billing")
	if err != nil {
		log.Fatal(err)
	}
	ib, err := inbox.New(inbox.Config{Consumer: "billing"}) // header event_id, table public.walbox_inbox
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.Migrate(ctx, db); err != nil { // or psql -f inbox/migrations/001_inbox.sql
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers("kafka:9092"),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("outbox.event.order"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // with walbox --delivery exactly-once
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	for {
		fetches := cl.PollFetches(ctx)
		if err := fetches.Err0(); err != nil {
			log.Fatal(err)
		}
		for _, rec := range fetches.Records() {
			applied, err := ib.Process(ctx, db, rec, func(ctx context.Context, tx pgx.Tx) error {
				var order struct {
					Customer   string `json:"customer"`
					TotalCents int64  `json:"total_cents"`
				}
				if err := json.Unmarshal(rec.Value, &order); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, `UPDATE balance SET cents = cents - $1 WHERE customer = $2`, order.TotalCents, order.Customer)
				return err
			})
			if errors.Is(err, inbox.ErrMissingEventID) {
				// Not one of walbox's events: fix the producer or Config.Header.
				// Stopping here keeps the record uncommitted, never skipped.
				log.Fatal(err)
			}
			if err != nil {
				// Nothing committed (or, on a commit lost with the connection,
				// perhaps it was): restart, the record comes again and the
				// inbox applies it at most once.
				log.Fatal(err)
			}
			log.Printf("offset %d applied=%v", rec.Offset, applied)
		}
		if err := cl.CommitUncommittedOffsets(ctx); err != nil {
			log.Fatal(err)
		}
	}
}
