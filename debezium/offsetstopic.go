package debezium

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadOffsetsTopic reads a distributed Connect cluster's offsets topic
// (offset.storage.topic) from its start to its current end, with a
// client built from opts (seed brokers, TLS, SASL), and returns its
// records as (key, value) entries in each partition's order; a nil value
// is a deleted offset. Connect writes a connector's offsets with the same
// key to one partition, so the last entry of a key is its offset.
func ReadOffsetsTopic(ctx context.Context, opts []kgo.Opt, topic string) ([][2][]byte, error) {
	cl, err := kgo.NewClient(append(opts, kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))...)
	if err != nil {
		return nil, fmt.Errorf("%w: kafka client: %v", ErrOffsets, err)
	}
	defer cl.Close()
	ends, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("%w: list the end offsets of topic %q: %v", ErrOffsets, topic, err)
	}
	if err := ends.Error(); err != nil {
		return nil, fmt.Errorf("%w: topic %q: %v; give Connect's offset.storage.topic with --debezium-offsets-topic", ErrOffsets, topic, err)
	}
	remaining := map[int32]int64{}
	ends.Each(func(o kadm.ListedOffset) {
		if o.Offset > 0 {
			remaining[o.Partition] = o.Offset
		}
	})
	if len(ends[topic]) == 0 {
		return nil, fmt.Errorf("%w: topic %q does not exist; give Connect's offset.storage.topic with --debezium-offsets-topic", ErrOffsets, topic)
	}
	var entries [][2][]byte
	for len(remaining) > 0 {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("%w: reading topic %q: %v", ErrOffsets, topic, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			ferr = fmt.Errorf("%w: reading topic %q partition %d: %v", ErrOffsets, t, p, err)
		})
		if ferr != nil {
			return nil, ferr
		}
		fs.EachRecord(func(r *kgo.Record) {
			end, ok := remaining[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			entries = append(entries, [2][]byte{r.Key, r.Value})
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return entries, nil
}
