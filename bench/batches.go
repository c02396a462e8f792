package bench

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// batchSample is how many records sampleBatches reads back at most.
const batchSample = 100_000

// batchCounter is a franz-go hook counting the record batches a consumer
// read and the records in them.
type batchCounter struct {
	batches, records atomic.Int64
}

var _ kgo.HookFetchBatchRead = (*batchCounter)(nil)

func (c *batchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	c.batches.Add(1)
	c.records.Add(int64(m.NumRecords))
}

// sampleBatches reads the first min(n, batchSample) records of topics, which
// hold n in all, and returns the mean number of records per record batch, as the relay's
// producer wrote them (Kafka stores batches as produced). Few records per
// batch mean many small produce requests, which cost the relay and the
// broker CPU per record. It returns 0 if nothing could be read in time.
func (e *Env) sampleBatches(ctx context.Context, topics []string, n int) float64 {
	var c batchCounter
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(e.Brokers...),
		kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(100*time.Millisecond),
		kgo.WithHooks(&c),
	)
	if err != nil {
		return 0
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for c.records.Load() < int64(min(n, batchSample)) && ctx.Err() == nil {
		cl.PollFetches(ctx)
	}
	if c.batches.Load() == 0 {
		return 0
	}
	return float64(c.records.Load()) / float64(c.batches.Load())
}
