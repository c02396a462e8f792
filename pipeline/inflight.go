package pipeline

import (
	"sync/atomic"
	"time"
)

// inflight bounds the records and bytes handed to the producer but not yet
// acknowledged, so memory stays flat however large a transaction is. The
// loop adds; promise callbacks release and wake the loop.
type inflight struct {
	records    atomic.Int64
	bytes      atomic.Int64
	maxRecords int64
	maxBytes   int64
	wake       chan struct{}
	// lastAck is when Kafka last acknowledged a record, busySince when
	// the last record was added to an empty window (Unix nanoseconds);
	// ackhealth.go.
	lastAck   atomic.Int64
	busySince atomic.Int64
}

func newInflight(maxRecords int, maxBytes int64) *inflight {
	return &inflight{maxRecords: int64(maxRecords), maxBytes: maxBytes, wake: make(chan struct{}, 1)}
}

// full reports whether the loop must wait before producing more. A single
// record larger than maxBytes still goes through when nothing else is in
// flight, otherwise it could never be sent.
func (f *inflight) full() bool {
	return f.records.Load() >= f.maxRecords || f.bytes.Load() >= f.maxBytes
}

func (f *inflight) add(size int64) {
	if f.records.Add(1) == 1 {
		f.busySince.Store(time.Now().UnixNano())
	}
	f.bytes.Add(size)
}

func (f *inflight) release(size int64) {
	f.records.Add(-1)
	f.bytes.Add(-size)
	select {
	case f.wake <- struct{}{}:
	default:
	}
}
