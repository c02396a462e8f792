package outboxtest

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Received is one record as a consumer saw it.
type Received struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       string
	Value     []byte
	Headers   map[string]string
	Timestamp time.Time
	// At is when the consumer received it.
	At time.Time
}

// Consumer reads topics from the start, with read_committed isolation
// unless ReadUncommitted is given.
type Consumer struct {
	cl *kgo.Client
}

// ConsumerOption changes a Consumer's defaults.
type ConsumerOption func(*[]kgo.Opt)

// ReadUncommitted makes the consumer read with read_uncommitted isolation:
// it then also sees the records of aborted and still open Kafka
// transactions, which a test can count to show that aborts happened and
// that read_committed consumers are spared them.
func ReadUncommitted() ConsumerOption {
	return func(o *[]kgo.Opt) { *o = append(*o, kgo.FetchIsolationLevel(kgo.ReadUncommitted())) }
}

// NewConsumer consumes the topics matching the regular expression pattern,
// with read_committed isolation unless an option says otherwise: records of
// aborted Kafka transactions are never returned, and those of open ones only
// once committed.
func NewConsumer(brokers []string, pattern string, opts ...ConsumerOption) (*Consumer, error) {
	kopts := []kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ConsumeRegex(),
		kgo.ConsumeTopics(pattern),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.MetadataMinAge(250 * time.Millisecond),
		// Regex subscriptions only discover new topics on a metadata
		// refresh; walbox creates topics as it goes.
		kgo.MetadataMaxAge(time.Second),
		kgo.FetchMaxWait(200 * time.Millisecond),
	}
	for _, o := range opts {
		o(&kopts) // a later isolation level replaces the earlier one
	}
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return nil, fmt.Errorf("consumer: %w", err)
	}
	return &Consumer{cl: cl}, nil
}

// Close closes the client.
func (c *Consumer) Close() { c.cl.Close() }

// Poll returns the records fetched in one poll, waiting at most until ctx
// ends; an ended ctx is not an error (the caller's deadline check reports).
// A poll can hold one partition's error beside other partitions' records:
// the records are returned with the first error, since the client has
// moved past them and would not fetch them again.
func (c *Consumer) Poll(ctx context.Context) ([]Received, error) {
	fs := c.cl.PollFetches(ctx)
	var errs []error
	fs.EachError(func(t string, p int32, err error) {
		if ctx.Err() == nil {
			errs = append(errs, fmt.Errorf("fetch %s/%d: %w", t, p, err))
		}
	})
	var first error
	if len(errs) > 0 {
		first = errs[0]
	}
	now := time.Now()
	var out []Received
	fs.EachRecord(func(r *kgo.Record) {
		h := make(map[string]string, len(r.Headers))
		for _, kv := range r.Headers {
			h[kv.Key] = string(kv.Value)
		}
		out = append(out, Received{
			Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: string(r.Key),
			Value: r.Value, Headers: h, Timestamp: r.Timestamp, At: now,
		})
	})
	return out, first
}

// ReadUntil polls until done reports true for everything received so far or
// ctx ends, and returns everything received.
func (c *Consumer) ReadUntil(ctx context.Context, done func([]Received) bool) ([]Received, error) {
	var all []Received
	for !done(all) {
		if ctx.Err() != nil {
			return all, fmt.Errorf("stopped waiting after %d records: %w", len(all), ctx.Err())
		}
		got, err := c.Poll(ctx)
		all = append(all, got...)
		if err != nil {
			return all, err
		}
	}
	return all, nil
}
