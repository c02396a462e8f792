package bench

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"

	"github.com/walbox/walbox/decoder"
)

// ceilingRelay is the fastest a logical-replication relay can be with the
// same libraries: it decodes pgoutput with walbox's decoder and produces the
// payload column keyed by the aggregate id to one topic, with only the
// event_id header (which the latency consumer joins on). No routing, no
// per-transaction ack tracking, no dedup, no backpressure of its own (the
// producer's buffer limit blocks it), and it confirms the position it has
// received rather than the one Kafka acknowledged, which a real relay must
// never do: a crash loses whatever was in flight.
type ceilingRelay struct {
	env   *Env
	log   *slog.Logger
	slot  string
	topic string

	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan error
	acked  atomic.Int64
	failed atomic.Pointer[error]
}

var _ slotRelay = (*ceilingRelay)(nil)

// NewCeiling returns the ceiling reading slot into topic prefix.all.
func (e *Env) NewCeiling(slot, prefix string) Relay {
	return &ceilingRelay{env: e, log: e.log, slot: slot, topic: prefix + ".all"}
}

func (c *ceilingRelay) Name() string       { return "ceiling" }
func (c *ceilingRelay) Slot() string       { return c.slot }
func (c *ceilingRelay) ConfirmsSlot() bool { return false }
func (c *ceilingRelay) Topics() []string   { return []string{c.topic} }
func (c *ceilingRelay) Done() int64        { return c.acked.Load() }

func (c *ceilingRelay) Err() error {
	if p := c.failed.Load(); p != nil {
		return *p
	}
	return nil
}

func (c *ceilingRelay) Start(ctx context.Context) error {
	start, err := c.env.CreateSlot(ctx, c.slot)
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.env.Brokers...),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.ProducerBatchMaxBytes(int32(walboxBatchMaxSize)),
		kgo.MaxBufferedRecords(walboxMaxInflight),
		kgo.WithLogger(kslog.New(c.log.With("relay", "ceiling"))),
	)
	if err != nil {
		return err
	}
	c.cl = cl
	conn, err := connectReplication(ctx, c.env.DSN(), "walbox-bench-ceiling")
	if err != nil {
		cl.Close()
		return err
	}
	err = pglogrepl.StartReplication(ctx, conn, c.slot, start, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names '" + Publication + "'"},
	})
	if err != nil {
		_ = conn.Close(context.Background())
		cl.Close()
		return fmt.Errorf("ceiling: start replication: %w", err)
	}
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = cancel
	c.done = make(chan error, 1)
	go func() {
		err := c.run(rctx, conn)
		_ = conn.Close(context.Background())
		if err != nil && rctx.Err() == nil {
			c.failed.Store(&err)
		}
		c.done <- err
	}()
	return nil
}

func (c *ceilingRelay) run(ctx context.Context, conn *pgconn.PgConn) error {
	dec := decoder.New()
	// Records must not fail because Stop cancelled ctx while they were
	// buffered: the drain counts acknowledgements.
	produceCtx := context.WithoutCancel(ctx)
	var (
		rel           *decoder.Relation
		idIdx, keyIdx int
		payIdx        int
		received      pglogrepl.LSN
		nextStatus    time.Time
	)
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			c.failed.CompareAndSwap(nil, &err)
			return
		}
		c.acked.Add(1)
	}
	for ctx.Err() == nil {
		if now := time.Now(); !now.Before(nextStatus) {
			nextStatus = now.Add(statusInterval)
			if received > 0 {
				if err := pglogrepl.SendStandbyStatusUpdate(ctx, conn, pglogrepl.StandbyStatusUpdate{
					WALWritePosition: received, WALFlushPosition: received, WALApplyPosition: received,
				}); err != nil {
					return err
				}
			}
		}
		rctx, cancel := context.WithDeadline(ctx, nextStatus)
		raw, err := conn.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			if pgconn.Timeout(err) {
				continue
			}
			return err
		}
		cd, ok := raw.(*pgproto3.CopyData)
		if !ok {
			if e, ok := raw.(*pgproto3.ErrorResponse); ok {
				return pgconn.ErrorResponseToPgError(e)
			}
			continue
		}
		if len(cd.Data) == 0 {
			continue
		}
		switch cd.Data[0] {
		case pglogrepl.PrimaryKeepaliveMessageByteID:
			ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(cd.Data[1:])
			if err != nil {
				return err
			}
			if ka.ReplyRequested {
				nextStatus = time.Time{}
			}
		case pglogrepl.XLogDataByteID:
			xld, err := pglogrepl.ParseXLogData(cd.Data[1:])
			if err != nil {
				return err
			}
			msg, err := dec.Decode(xld.WALStart, xld.WALData)
			if err != nil {
				return err
			}
			switch m := msg.(type) {
			case *decoder.Insert:
				if m.Relation != rel {
					rel = m.Relation
					idIdx, keyIdx, payIdx = rel.ColumnIndex("id"), rel.ColumnIndex("aggregate_id"), rel.ColumnIndex("payload")
				}
				c.cl.Produce(produceCtx, &kgo.Record{
					Topic:   c.topic,
					Key:     m.Values[keyIdx].Data,
					Value:   m.Values[payIdx].Data,
					Headers: []kgo.RecordHeader{{Key: "event_id", Value: m.Values[idIdx].Data}},
				}, promise)
			case *decoder.Commit:
				received = m.EndLSN
			}
		}
	}
	return nil
}

func (c *ceilingRelay) Stop() error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	<-c.done
	fctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := c.cl.Flush(fctx)
	c.cl.Close()
	c.cancel = nil
	return err
}

// connectReplication opens a replication connection (replication=database).
func connectReplication(ctx context.Context, dsn, app string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	cfg.RuntimeParams["replication"] = "database"
	cfg.RuntimeParams["application_name"] = app
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect for replication: %w", err)
	}
	return conn, nil
}
