package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// latencyConsumer reads the topics of one run from their start and records,
// per event id, when the first copy of the event arrived.
type latencyConsumer struct {
	cl      *kgo.Client
	clk     Clock
	firstID int64
	recvAt  []time.Duration // indexed by id - firstID

	received atomic.Int64 // distinct events
	dups     atomic.Int64
	// lastID, when not nil, is the highest event id seen per record key
	// (aggregate), for runs whose writer commits each aggregate's events
	// in id order: a smaller id after a larger one of the same key is an
	// order violation. Only the run goroutine touches it.
	lastID   map[string]int64
	disorder atomic.Int64
	foreign  atomic.Int64 // records without a known event id
	wg       sync.WaitGroup
	cancel   context.CancelFunc
	errMu    sync.Mutex
	fetchErr error
}

// startConsumer starts consuming topics; ids outside [firstID,
// firstID+capacity) count as foreign.
func (e *Env) startConsumer(topics []string, firstID int64, capacity int, clk Clock) (*latencyConsumer, error) {
	return e.startConsumerOrder(topics, firstID, capacity, clk, false)
}

// startConsumerOrder is startConsumer that, if checkOrder, also counts
// per-key order violations (see latencyConsumer.lastID).
func (e *Env) startConsumerOrder(topics []string, firstID int64, capacity int, clk Clock, checkOrder bool) (*latencyConsumer, error) {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.Brokers...),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(500*time.Millisecond),
		// What a consumer of exactly-once delivery must use; the same for
		// every relay, so the latencies compare (without open Kafka
		// transactions it sees records as soon as read_uncommitted would).
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &latencyConsumer{cl: cl, clk: clk, firstID: firstID, recvAt: make([]time.Duration, capacity), cancel: cancel}
	if checkOrder {
		c.lastID = map[string]int64{}
	}
	c.wg.Add(1)
	go c.run(ctx)
	return c, nil
}

func (c *latencyConsumer) run(ctx context.Context) {
	defer c.wg.Done()
	for ctx.Err() == nil {
		fs := c.cl.PollFetches(ctx)
		now := c.clk.Now()
		fs.EachError(func(t string, p int32, err error) {
			if ctx.Err() == nil {
				c.errMu.Lock()
				if c.fetchErr == nil {
					c.fetchErr = fmt.Errorf("fetch %s/%d: %w", t, p, err)
				}
				c.errMu.Unlock()
			}
		})
		fs.EachRecord(func(r *kgo.Record) { c.take(r, now) })
	}
}

// take records the arrival of r at now.
func (c *latencyConsumer) take(r *kgo.Record, now time.Duration) {
	idx := int64(-1)
	for _, h := range r.Headers {
		if h.Key == "event_id" {
			if id, err := strconv.ParseInt(string(h.Value), 10, 64); err == nil {
				idx = id - c.firstID
			}
			break
		}
	}
	if idx < 0 || idx >= int64(len(c.recvAt)) {
		c.foreign.Add(1)
		return
	}
	if c.recvAt[idx] != 0 {
		c.dups.Add(1)
		return
	}
	if c.lastID != nil {
		id, k := c.firstID+idx, string(r.Key)
		if last, ok := c.lastID[k]; ok && id < last {
			c.disorder.Add(1)
		} else {
			c.lastID[k] = id
		}
	}
	c.recvAt[idx] = now
	c.received.Add(1)
}

// waitFor waits until n distinct events arrived, ctx ends or the timeout
// passes; it reports whether all arrived.
func (c *latencyConsumer) waitFor(ctx context.Context, n int, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for c.received.Load() < int64(n) {
		if ctx.Err() != nil || time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// stop ends consumption; recvAt may be read afterwards.
func (c *latencyConsumer) stop() error {
	c.cancel()
	c.wg.Wait()
	c.cl.Close()
	c.errMu.Lock()
	defer c.errMu.Unlock()
	return c.fetchErr
}
