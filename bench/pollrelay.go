package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// pollIdle is how long the polling relay sleeps after a poll found nothing.
const pollIdle = 200 * time.Millisecond

// pollRelay is the relay teams run today, done right (see outbox.md, "Known
// relay bugs"): one worker, and one transaction per batch on one connection
// that selects the pending rows FOR UPDATE SKIP LOCKED, produces them and
// waits for every ack, marks them sent and commits. It produces the same
// records as walbox (topic per aggregate type, aggregate id as key, event_id,
// event_type and the row's headers as record headers).
type pollRelay struct {
	env    *Env
	batch  int
	prefix string

	conn   *pgx.Conn
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan error
	sent   atomic.Int64
	polls  atomic.Int64
	failed atomic.Pointer[error]
}

// NewPollRelay returns a polling relay fetching batch rows per poll into
// topics prefix.<aggregate_type>.
func (e *Env) NewPollRelay(batch int, prefix string) Relay {
	return &pollRelay{env: e, batch: batch, prefix: prefix}
}

func (p *pollRelay) Name() string { return "poll-" + strconv.Itoa(p.batch) }
func (p *pollRelay) Done() int64  { return p.sent.Load() }
func (p *pollRelay) Topics() []string {
	return []string{p.prefix + ".order", p.prefix + ".customer"}
}

func (p *pollRelay) Err() error {
	if e := p.failed.Load(); e != nil {
		return *e
	}
	return nil
}

func (p *pollRelay) Start(ctx context.Context) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(p.env.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchMaxBytes(int32(walboxBatchMaxSize)),
		kgo.WithLogger(kslog.New(p.env.log.With("relay", p.Name()))),
	)
	if err != nil {
		return err
	}
	p.cl = cl
	conn, err := p.env.Connect(ctx)
	if err != nil {
		cl.Close()
		return err
	}
	p.conn = conn
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p.cancel = cancel
	p.done = make(chan error, 1)
	go func() {
		err := p.run(rctx)
		if err != nil && rctx.Err() == nil {
			p.failed.Store(&err)
		}
		p.done <- err
	}()
	return nil
}

func (p *pollRelay) run(ctx context.Context) error {
	var b pollBatch
	for ctx.Err() == nil {
		n, err := p.cycle(ctx, &b)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if n == 0 {
			t := time.NewTimer(pollIdle)
			select {
			case <-ctx.Done():
				t.Stop()
			case <-t.C:
			}
		}
	}
	return nil
}

// pollBatch holds one cycle's rows, reused across cycles.
type pollBatch struct {
	ids  []int64
	recs []*kgo.Record
}

const pollSQL = `SELECT id, aggregate_type, aggregate_id, event_type, payload, headers
FROM public.outbox WHERE sent_at IS NULL ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED`

// cycle relays one batch in one transaction and returns its size.
func (p *pollRelay) cycle(ctx context.Context, b *pollBatch) (int, error) {
	p.polls.Add(1)
	tx, err := p.conn.Begin(ctx)
	if err != nil {
		return 0, fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after commit
	rows, err := tx.Query(ctx, pollSQL, p.batch)
	if err != nil {
		return 0, fmt.Errorf("poll: %w", err)
	}
	b.ids, b.recs = b.ids[:0], b.recs[:0]
	for rows.Next() {
		var (
			id                        int64
			aggType, aggID, eventType string
			payload, headers          []byte
		)
		if err := rows.Scan(&id, &aggType, &aggID, &eventType, &payload, &headers); err != nil {
			rows.Close()
			return 0, fmt.Errorf("scan: %w", err)
		}
		var hs map[string]string
		if err := json.Unmarshal(headers, &hs); err != nil {
			rows.Close()
			return 0, fmt.Errorf("row %d: headers: %w", id, err)
		}
		rec := &kgo.Record{
			Topic: p.prefix + "." + aggType,
			Key:   []byte(aggID),
			Value: payload,
			Headers: append(make([]kgo.RecordHeader, 0, 2+len(hs)),
				kgo.RecordHeader{Key: "event_id", Value: strconv.AppendInt(nil, id, 10)},
				kgo.RecordHeader{Key: "event_type", Value: []byte(eventType)}),
		}
		for k, v := range hs {
			rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: k, Value: []byte(v)})
		}
		b.ids = append(b.ids, id)
		b.recs = append(b.recs, rec)
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("poll: %w", err)
	}
	if len(b.ids) == 0 {
		return 0, tx.Commit(ctx)
	}
	if err := p.cl.ProduceSync(ctx, b.recs...).FirstErr(); err != nil {
		return 0, fmt.Errorf("produce: %w", err)
	}
	if _, err := tx.Exec(ctx, `UPDATE public.outbox SET sent_at = now() WHERE id = ANY($1)`, b.ids); err != nil {
		return 0, fmt.Errorf("mark sent: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return 0, fmt.Errorf("commit: %w", err)
	}
	p.sent.Add(int64(len(b.ids)))
	return len(b.ids), nil
}

func (p *pollRelay) Stop() error {
	if p.cancel == nil {
		return nil
	}
	p.cancel()
	err := <-p.done
	_ = p.conn.Close(context.Background())
	p.cl.Close()
	p.cancel = nil
	return err
}
