package debezium

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// ReadOffsetsTopic reads a distributed Connect cluster's offsets topic
// (offset.storage.topic) from its start to its last stable offset, with a
// client built from opts (seed brokers, TLS, SASL), and returns its
// committed records as (key, value) entries in each partition's order; a
// nil value is a deleted offset. Connect writes a connector's offsets with
// the same key to one partition, so the last entry of a key is its offset.
//
// The topic is read as Connect reads it with exactly.once.source.support
// enabled (offsets written in transactions): read_committed, so an aborted
// transaction's offsets are never taken (they would name positions whose
// records were aborted too: taking over after them loses those events),
// and up to the last stable offset, past which nothing is committed yet.
// Transaction markers take offsets but are no records: the reader keeps
// them (kgo.KeepControlRecords) only to see its position reach the end,
// since a partition written transactionally ends with one.
func ReadOffsetsTopic(ctx context.Context, opts []kgo.Opt, topic string) ([][2][]byte, error) {
	cl, err := kgo.NewClient(append(opts,
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.KeepControlRecords(),
	)...)
	if err != nil {
		return nil, fmt.Errorf("%w: kafka client: %v", ErrOffsets, err)
	}
	defer cl.Close()
	// ListCommittedOffsets is the last stable offset of each partition
	// (ListOffsets with read_committed isolation).
	ends, err := kadm.NewClient(cl).ListCommittedOffsets(ctx, topic)
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
			return nil, fmt.Errorf("%w: reading topic %q: %v (partitions not read to their end: %v)", ErrOffsets, topic, err, remaining)
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
			if !ok {
				return
			}
			if r.Offset < end && !r.Attrs.IsControl() {
				entries = append(entries, [2][]byte{r.Key, r.Value})
			}
			// At or past end-1 the partition is read to its end (past it
			// when compaction removed the record at end-1).
			if r.Offset+1 >= end {
				delete(remaining, r.Partition)
			}
		})
	}
	return entries, nil
}
