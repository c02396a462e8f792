package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// payloadSize is the target size of an event's JSON payload as the writer
// sends it (Postgres stores jsonb and prints it back with a space after each
// ':' and ',', so the records walbox produces are a little larger).
const payloadSize = 300

var outboxColumns = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers"}

// generator makes outbox rows for a fixed set of aggregates. The id is
// given by the caller. Not safe for concurrent use; give each writer its own.
type generator struct {
	rng        *rand.Rand
	aggregates int
	// size is the payload's target size; beyond payloadSize the padding
	// is random hex, so that neither TOAST nor the producer's compression
	// makes a large payload small.
	size    int
	aggIDs  []string
	types   []string
	evTypes []string
}

func newGenerator(seed uint64, aggregates int) *generator {
	g := &generator{rng: rand.New(rand.NewPCG(seed, seed^0x0b0e)), aggregates: aggregates, size: payloadSize}
	for a := range aggregates {
		typ := "order"
		if a%2 == 1 {
			typ = "customer"
		}
		g.aggIDs = append(g.aggIDs, typ+"-"+pad4(a))
		g.types = append(g.types, typ)
		g.evTypes = append(g.evTypes, typ+".updated")
	}
	return g
}

func pad4(n int) string {
	s := strconv.Itoa(n)
	for len(s) < 4 {
		s = "0" + s
	}
	return s
}

// row is one outbox row as written.
type row struct {
	id                        int64
	aggType, aggID, eventType string
	payload, headers          []byte
}

// next fills r with a new event for a random aggregate, reusing r's buffers.
func (g *generator) next(id int64, r *row) {
	a := g.rng.IntN(g.aggregates)
	r.id, r.aggType, r.aggID, r.eventType = id, g.types[a], g.aggIDs[a], g.evTypes[a]
	p := r.payload[:0]
	p = append(p, `{"aggregate_id":"`...)
	p = append(p, r.aggID...)
	p = append(p, `","event_id":`...)
	p = strconv.AppendInt(p, id, 10)
	p = append(p, `,"amount_cents":`...)
	p = strconv.AppendInt(p, int64(g.rng.IntN(1_000_000)), 10)
	p = append(p, `,"currency":"EUR","status":"confirmed","customer":{"tier":"gold","country":"DE"},"items":[{"sku":"SKU-`...)
	p = strconv.AppendInt(p, int64(g.rng.IntN(100_000)), 10)
	p = append(p, `","qty":`...)
	p = strconv.AppendInt(p, int64(1+g.rng.IntN(5)), 10)
	p = append(p, `,"price_cents":`...)
	p = strconv.AppendInt(p, int64(g.rng.IntN(100_000)), 10)
	p = append(p, `}],"note":"`...)
	if g.size > payloadSize {
		const hex = "0123456789abcdef"
		for len(p) < g.size-2 {
			v := g.rng.Uint64()
			for i := 0; i < 16 && len(p) < g.size-2; i++ {
				p = append(p, hex[v&15])
				v >>= 4
			}
		}
	}
	for len(p) < g.size-2 {
		p = append(p, 'x')
	}
	p = append(p, `"}`...)
	r.payload = p

	h := r.headers[:0]
	// A W3C trace context, as a traced writer stores it, sampled in one
	// row of a hundred (a writer sampling 1 %); walbox traces it only in
	// the tracing drains (tracing.go).
	h = append(h, `{"traceparent":"00-`...)
	h = strconv.AppendUint(h, g.rng.Uint64()|1<<63, 16)
	h = strconv.AppendUint(h, g.rng.Uint64()|1<<63, 16)
	h = append(h, '-')
	h = strconv.AppendUint(h, g.rng.Uint64()|1<<63, 16)
	if id%100 == 0 {
		h = append(h, `-01","correlation_id":"c-`...)
	} else {
		h = append(h, `-00","correlation_id":"c-`...)
	}
	h = strconv.AppendInt(h, id, 10)
	h = append(h, `"}`...)
	r.headers = h
}

// copySource feeds CopyFrom with n generated rows with ids from first.
type copySource struct {
	g     *generator
	first int64
	n     int
	i     int
	r     row
	vals  []any
	bytes int64
}

func (s *copySource) Next() bool {
	if s.i >= s.n {
		return false
	}
	s.g.next(s.first+int64(s.i), &s.r)
	s.i++
	s.bytes += int64(len(s.r.payload))
	// pgx encodes a []byte as raw JSON for jsonb; it copies during
	// encoding, so the buffers can be reused for the next row.
	s.vals = append(s.vals[:0], s.r.id, s.r.aggType, s.r.aggID, s.r.eventType, s.r.payload, s.r.headers)
	return true
}

func (s *copySource) Values() ([]any, error) { return s.vals, nil }
func (s *copySource) Err() error             { return nil }

// LoadResult describes a backlog written by Load.
type LoadResult struct {
	Events       int
	Txns         int
	FirstID      int64
	PayloadBytes int64
	Duration     time.Duration
}

// Load writes txns transactions of txnSize rows each with COPY, over conns
// connections in parallel, with ids from firstID on. The transaction with
// index t holds ids firstID+t*txnSize onwards; with several connections the
// commit order only roughly follows the ids.
func (e *Env) Load(ctx context.Context, firstID int64, txns, txnSize, conns, aggregates int) (LoadResult, error) {
	return e.LoadSized(ctx, firstID, txns, txnSize, conns, aggregates, payloadSize)
}

// LoadSized is Load with payloads of about payloadBytes bytes.
func (e *Env) LoadSized(ctx context.Context, firstID int64, txns, txnSize, conns, aggregates, payloadBytes int) (LoadResult, error) {
	start := time.Now()
	var next atomic.Int64
	var payload atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for w := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := e.Connect(ctx)
			if err != nil {
				errs <- err
				return
			}
			defer conn.Close(context.Background())
			src := &copySource{g: newGenerator(uint64(firstID)+uint64(w), aggregates)}
			src.g.size = max(payloadBytes, payloadSize)
			for {
				t := next.Add(1) - 1
				if t >= int64(txns) || ctx.Err() != nil {
					break
				}
				src.first, src.n, src.i = firstID+t*int64(txnSize), txnSize, 0
				if err := copyTx(ctx, conn, src); err != nil {
					errs <- err
					return
				}
			}
			payload.Add(src.bytes)
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return LoadResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return LoadResult{}, err
	}
	return LoadResult{
		Events: txns * txnSize, Txns: txns, FirstID: firstID,
		PayloadBytes: payload.Load(), Duration: time.Since(start),
	}, nil
}

func copyTx(ctx context.Context, conn *pgx.Conn, src *copySource) error {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after commit
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"public", "outbox"}, outboxColumns, src); err != nil {
		return fmt.Errorf("copy %d rows from id %d: %w", src.n, src.first, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
