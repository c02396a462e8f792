package outboxtest

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"

	"github.com/jackc/pgx/v5"
)

// DDL creates the recommended outbox table (the same shape as
// migrations/001_outbox.sql) in the public schema.
const DDL = `
CREATE TABLE IF NOT EXISTS public.outbox (
    id             uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text        NOT NULL,
    payload        jsonb       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}',
    created_at     timestamptz NOT NULL DEFAULT now()
)`

// Event is one outbox row as the writer inserts it.
type Event struct {
	ID            string
	AggregateType string
	AggregateID   string
	EventType     string
	// Seq numbers the events of one aggregate from 1; the order check
	// compares it with the order Kafka delivered.
	Seq     int
	Payload []byte
	Headers map[string]string
}

// Topic is the topic the default template routes the event to.
func (e Event) Topic() string { return "outbox.event." + e.AggregateType }

// Generator makes events for a fixed set of aggregates with per-aggregate
// sequence numbers. Not safe for concurrent use.
type Generator struct {
	rng        *rand.Rand
	aggregates int
	types      []string
	seq        map[string]int
	next       int
	PadBytes   int // payload padding, to reach a target size
}

// NewGenerator returns a generator over n aggregates spread over the
// aggregate types given (default "order" and "customer").
func NewGenerator(seed uint64, aggregates int, types ...string) *Generator {
	if len(types) == 0 {
		types = []string{"order", "customer"}
	}
	return &Generator{rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), aggregates: aggregates, types: types, seq: map[string]int{}}
}

// Next returns the next event for a random aggregate.
func (g *Generator) Next() Event {
	a := g.rng.IntN(g.aggregates)
	typ := g.types[a%len(g.types)]
	aggID := fmt.Sprintf("%s-%04d", typ, a)
	g.seq[aggID]++
	g.next++
	seq := g.seq[aggID]
	id := fmt.Sprintf("%08x-0000-4000-8000-%012x", g.rng.Uint32(), g.next)
	payload, _ := json.Marshal(map[string]any{
		"aggregate_id": aggID,
		"seq":          seq,
		"amount_cents": g.rng.IntN(100000),
		"pad":          strings.Repeat("x", g.PadBytes),
	})
	return Event{
		ID: id, AggregateType: typ, AggregateID: aggID, EventType: typ + ".updated", Seq: seq,
		Payload: payload,
		Headers: map[string]string{"trace_id": fmt.Sprintf("trace-%d", g.next)},
	}
}

// Batch returns n events.
func (g *Generator) Batch(n int) []Event {
	out := make([]Event, n)
	for i := range out {
		out[i] = g.Next()
	}
	return out
}

// WriteTx inserts events in one transaction. Transactions of more than a
// few rows use COPY, which logical decoding still reports as INSERTs.
func WriteTx(ctx context.Context, conn *pgx.Conn, events []Event) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck // no-op after commit
	if len(events) <= 8 {
		for _, e := range events {
			h, _ := json.Marshal(e.Headers)
			if _, err := tx.Exec(ctx,
				`INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ($1, $2, $3, $4, $5, $6)`,
				e.ID, e.AggregateType, e.AggregateID, e.EventType, string(e.Payload), string(h)); err != nil {
				return fmt.Errorf("insert event %s: %w", e.ID, err)
			}
		}
	} else {
		rows := make([][]any, len(events))
		for i, e := range events {
			h, _ := json.Marshal(e.Headers)
			rows[i] = []any{e.ID, e.AggregateType, e.AggregateID, e.EventType, string(e.Payload), string(h)}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"public", "outbox"},
			[]string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers"},
			pgx.CopyFromRows(rows)); err != nil {
			return fmt.Errorf("copy %d events: %w", len(events), err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
