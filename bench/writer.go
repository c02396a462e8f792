package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// Clock is the common time base of the writer and the consumer: offsets from
// one monotonic instant, so a latency is a difference of two offsets.
type Clock struct{ start time.Time }

// NewClock starts a clock now.
func NewClock() Clock { return Clock{start: time.Now()} }

// Now returns the time since the clock started, never 0.
func (c Clock) Now() time.Duration { return max(time.Since(c.start), 1) }

// SteadyLoad describes the writer of the steady-load scenario.
type SteadyLoad struct {
	Rate       int           // events per second
	Duration   time.Duration // how long the writer writes
	MinTxn     int           // rows per transaction, uniformly from MinTxn to MaxTxn
	MaxTxn     int
	Conns      int // writer connections
	Aggregates int
}

// WriteResult is what the steady writer committed.
type WriteResult struct {
	FirstID int64
	Events  int
	Txns    int
	// CommitAt[i] is when the commit of event FirstID+i returned, 0 if it
	// was never written.
	CommitAt     []time.Duration
	PayloadBytes int64
	Elapsed      time.Duration
	// MaxLag is how far the writer fell behind its schedule at worst; a
	// large value means the target rate was not reached.
	MaxLag time.Duration
}

// AchievedRate is events per second over the writer's run.
func (w *WriteResult) AchievedRate() float64 { return float64(w.Events) / w.Elapsed.Seconds() }

// maxEvents is the capacity needed for a run: the schedule cannot exceed it.
func (l SteadyLoad) maxEvents() int {
	return int(float64(l.Rate)*l.Duration.Seconds()) + l.MaxTxn + 1
}

type txnJob struct {
	first int64
	n     int
}

// Write runs the steady writer: transactions of MinTxn..MaxTxn rows, each a
// single multi-row INSERT committed on its own, scheduled so that events
// arrive at Rate per second (open loop: a late transaction is sent at once,
// the next ones keep their slots). Ids run from firstID. The commit-return
// time of every event is recorded on clk.
func (e *Env) Write(ctx context.Context, l SteadyLoad, firstID int64, clk Clock) (*WriteResult, error) {
	res := &WriteResult{FirstID: firstID, CommitAt: make([]time.Duration, l.maxEvents())}
	jobs := make(chan txnJob, 1<<16)
	conns := make([]*pgx.Conn, l.Conns)
	for i := range conns {
		c, err := e.Connect(ctx)
		if err != nil {
			return nil, err
		}
		defer c.Close(context.Background())
		conns[i] = c
	}

	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		firstErr error
		payload  int64
	)
	for w, conn := range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			g := newGenerator(uint64(firstID)+uint64(w)*7919, l.Aggregates)
			var bytes int64
			defer func() {
				mu.Lock()
				payload += bytes
				mu.Unlock()
			}()
			rows := make([]row, l.MaxTxn)
			args := make([]any, 0, 6*l.MaxTxn)
			for job := range jobs {
				args = args[:0]
				for i := range job.n {
					r := &rows[i]
					g.next(job.first+int64(i), r)
					bytes += int64(len(r.payload))
					args = append(args, r.id, r.aggType, r.aggID, r.eventType, string(r.payload), string(r.headers))
				}
				if _, err := conn.Exec(ctx, insertSQL(job.n), args...); err != nil {
					mu.Lock()
					if firstErr == nil && ctx.Err() == nil {
						firstErr = fmt.Errorf("insert %d rows from id %d: %w", job.n, job.first, err)
					}
					mu.Unlock()
					continue
				}
				at := clk.Now()
				for i := range job.n {
					res.CommitAt[job.first-firstID+int64(i)] = at
				}
			}
		}()
	}

	rng := rand.New(rand.NewPCG(uint64(firstID), 42))
	start := time.Now()
	perEvent := time.Second / time.Duration(l.Rate)
	next := firstID
	events := 0
	limit := len(res.CommitAt) - l.MaxTxn
schedule:
	for {
		due := time.Duration(events) * perEvent
		if due >= l.Duration || events >= limit {
			break
		}
		if wait := due - time.Since(start); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				break schedule
			case <-t.C:
			}
		} else if lag := -wait; lag > res.MaxLag {
			res.MaxLag = lag
		}
		n := l.MinTxn + rng.IntN(l.MaxTxn-l.MinTxn+1)
		select {
		case jobs <- txnJob{first: next, n: n}:
		case <-ctx.Done():
			break schedule
		}
		next += int64(n)
		events += n
		res.Txns++
	}
	close(jobs)
	wg.Wait()
	res.Elapsed = time.Since(start)
	res.Events = events
	res.CommitAt = res.CommitAt[:events]
	res.PayloadBytes = payload
	if firstErr != nil {
		return res, firstErr
	}
	return res, ctx.Err()
}

var insertCache sync.Map // int -> string

// insertSQL returns a multi-row INSERT of n outbox rows.
func insertSQL(n int) string {
	if s, ok := insertCache.Load(n); ok {
		return s.(string)
	}
	var b strings.Builder
	b.WriteString("INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers) VALUES ")
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteByte('(')
		for c := range 6 {
			if c > 0 {
				b.WriteByte(',')
			}
			b.WriteByte('$')
			b.WriteString(strconv.Itoa(i*6 + c + 1))
		}
		b.WriteByte(')')
	}
	s := b.String()
	insertCache.Store(n, s)
	return s
}
