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
// each, a whole poll per transaction: the balance updates and the inbox
// rows commit together, and the Kafka offsets are committed only after
// that commit. Kafka may deliver a record again (a crash before the offset
// commit, a rebalance, walbox's at-least-once mode); the inbox skips it.
// (Compiled, not run: it needs a database and a broker.)
func Example() {
	ctx := context.Background()
	db, err := pgx.Connect(ctx, "postgres://billing@db/billing") // or a *pgxpool.Pool
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close(ctx)
	// The consumer snippets of docs/delivery.md and of the package
	// documentation are this code, from here to the end of the loop
	// (internal/doccheck compares them).
	ib, err := inbox.New(inbox.Config{Consumer: "billing"}) // header event_id, table public.walbox_inbox
	if err != nil {
		log.Fatal(err)
	}
	if err := ib.Migrate(ctx, db); err != nil { // or psql -f each of inbox/migrations/*.sql, in order
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers("kafka:9092"),
		kgo.ConsumerGroup("billing"),
		kgo.ConsumeTopics("outbox.event.order"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // with walbox --delivery exactly-once
		// Offsets are committed by CommitRecords below, only after
		// ProcessBatch's COMMIT: franz-go's default autocommit would
		// also commit those of a batch that failed.
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
		recs := fetches.Records() // a whole poll in one database transaction
		applied, err := ib.ProcessBatch(ctx, db, recs, func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error {
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
		var failed *inbox.HandlerError
		switch {
		case errors.Is(err, inbox.ErrMissingEventID):
			// Not a record the inbox can deduplicate (see the package
			// documentation): fix the producer or Config.Header. Stopping
			// here keeps its offset uncommitted, never skipped.
			log.Fatal(err)
		case errors.As(err, &failed):
			// Nothing of the poll committed. Restart without committing
			// (never poll on: the next batch's commit would cover this
			// one): the records come again, from the first, and the inbox
			// applies each at most once. (A record that can never succeed
			// needs a decision of its own, such as a dead-letter table.)
			log.Fatalf("offset %d: %v", failed.Record.Offset, err)
		case err != nil:
			// Nothing committed (or, on a commit lost with the connection,
			// perhaps all of it): restart, as above.
			log.Fatal(err)
		}
		log.Printf("%d records, %d applied now", len(recs), count(applied))
		// Only now, after ProcessBatch's COMMIT.
		if err := cl.CommitRecords(ctx, recs...); err != nil {
			log.Fatal(err)
		}
	}
}

func count(applied []bool) (n int) {
	for _, a := range applied {
		if a {
			n++
		}
	}
	return n
}
