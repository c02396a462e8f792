package outboxtest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// Report compares what Postgres committed with what Kafka delivered.
type Report struct {
	Written    int
	Delivered  int // distinct events delivered
	Lost       int
	Duplicates int // deliveries beyond the first of an event
	// OrderViolations counts events whose first delivery came after the
	// first delivery of a later event of the same aggregate.
	OrderViolations int
	// Mismatches counts delivered events whose topic, key, value or
	// headers differ from what was written.
	Mismatches int
	// Problems holds the first few findings, for the failure message.
	Problems []string
}

// OK reports no loss, no order violation and no mismatch.
func (r Report) OK() bool { return r.Lost == 0 && r.OrderViolations == 0 && r.Mismatches == 0 }

func (r Report) String() string {
	s := fmt.Sprintf("written=%d delivered=%d lost=%d duplicates=%d order_violations=%d mismatches=%d",
		r.Written, r.Delivered, r.Lost, r.Duplicates, r.OrderViolations, r.Mismatches)
	if len(r.Problems) > 0 {
		s += "\n  " + strings.Join(r.Problems, "\n  ")
	}
	return s
}

func (r *Report) problem(format string, args ...any) {
	if len(r.Problems) < 10 {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// DistinctIDs counts the distinct event_id headers received.
func DistinctIDs(got []Received) int {
	seen := make(map[string]struct{}, len(got))
	for _, g := range got {
		seen[g.Headers["event_id"]] = struct{}{}
	}
	return len(seen)
}

// Check dedups the delivered records by their event_id header (keeping the
// first delivery, as an idempotent consumer does) and checks every written
// event arrived, on the expected topic with the expected key, value and
// headers, and that per aggregate the sequence numbers arrive in order.
// Records must be in consumption order per partition (as Poll returns them).
func Check(written []Event, got []Received) Report {
	return CheckPrefix(written, got, "outbox.event.")
}

// CheckPrefix is Check for a topic template "<prefix>{aggregate_type}".
func CheckPrefix(written []Event, got []Received, prefix string) Report {
	rep := Report{Written: len(written)}
	byID := make(map[string]Event, len(written))
	for _, e := range written {
		byID[e.ID] = e
	}
	first := make(map[string]Received, len(got))
	// Kafka orders within a partition only; a key lives in one partition,
	// so walk each partition in offset order.
	sorted := append([]Received(nil), got...)
	sort.SliceStable(sorted, func(i, j int) bool {
		a, b := sorted[i], sorted[j]
		if a.Topic != b.Topic {
			return a.Topic < b.Topic
		}
		if a.Partition != b.Partition {
			return a.Partition < b.Partition
		}
		return a.Offset < b.Offset
	})
	lastSeq := map[string]int{}
	for _, g := range sorted {
		id := g.Headers["event_id"]
		if _, dup := first[id]; dup {
			rep.Duplicates++
			continue
		}
		first[id] = g
		e, ok := byID[id]
		if !ok {
			rep.Mismatches++
			rep.problem("delivered event %q was never written (topic %s key %s)", id, g.Topic, g.Key)
			continue
		}
		if g.Topic != prefix+e.AggregateType || g.Key != e.AggregateID || !jsonEqual(g.Value, e.Payload) ||
			g.Headers["event_type"] != e.EventType || g.Headers["trace_id"] != e.Headers["trace_id"] {
			rep.Mismatches++
			rep.problem("event %s: got topic=%s key=%s headers=%v value=%s; wrote topic=%s key=%s type=%s",
				id, g.Topic, g.Key, g.Headers, g.Value, prefix+e.AggregateType, e.AggregateID, e.EventType)
		}
		if e.Seq <= lastSeq[e.AggregateID] {
			rep.OrderViolations++
			rep.problem("aggregate %s: seq %d delivered after seq %d", e.AggregateID, e.Seq, lastSeq[e.AggregateID])
		} else {
			lastSeq[e.AggregateID] = e.Seq
		}
	}
	rep.Delivered = len(first)
	for _, e := range written {
		if _, ok := first[e.ID]; !ok {
			rep.Lost++
			rep.problem("event %s (aggregate %s seq %d) was never delivered", e.ID, e.AggregateID, e.Seq)
		}
	}
	return rep
}

// jsonEqual compares JSON documents semantically: Postgres renders jsonb in
// its own canonical form (key order, spacing), not the writer's bytes.
func jsonEqual(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return bytes.Equal(xa, ya)
}

// AllOf returns a ReadUntil condition that holds once every event of
// written has been received. Seeing the last event written is no such
// barrier: a consumer fetches a topic's partitions independently, and a
// producer's batches to the other partitions may still be in flight, so
// under load events written before it on other partitions can still be on
// their way (a streaming test once "lost" two of four aggregates' last
// 2,085 events that way).
func AllOf(written []Event) func([]Received) bool {
	missing := make(map[string]struct{}, len(written))
	for _, e := range written {
		missing[e.ID] = struct{}{}
	}
	seen := 0
	return func(got []Received) bool {
		for ; seen < len(got); seen++ {
			delete(missing, got[seen].Headers["event_id"])
		}
		return len(missing) == 0
	}
}
