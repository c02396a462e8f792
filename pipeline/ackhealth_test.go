package pipeline

import (
	"testing"
	"time"
)

// TestAckWait: records waiting with no acknowledgement for AckStallAfter
// are reported, counted from the last ack or from when the window stopped
// being empty, whichever is later; an empty window never is.
func TestAckWait(t *testing.T) {
	now := time.Date(2026, 12, 1, 23, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) int64 { return now.Add(-d).UnixNano() }
	for _, c := range []struct {
		name               string
		records            int64
		lastAck, busySince int64
		waiting            bool
		silent             time.Duration
	}{
		{"empty window", 0, ago(time.Hour), ago(time.Hour), false, 0},
		{"acks flowing", 10, ago(time.Second), ago(time.Minute), false, time.Second},
		{"no ack for long", 10, ago(20 * time.Second), ago(time.Minute), true, 20 * time.Second},
		{"idle, then new records", 10, ago(time.Hour), ago(2 * time.Second), false, 2 * time.Second},
		{"idle, then records waiting long", 10, ago(time.Hour), ago(AckStallAfter), true, AckStallAfter},
		{"never acked", 10, 0, ago(30 * time.Second), true, 30 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newInflight(100, 1<<20)
			f.records.Store(c.records)
			f.lastAck.Store(c.lastAck)
			f.busySince.Store(c.busySince)
			waiting, records, _, silent := f.ackWait(now)
			if waiting != c.waiting || silent != c.silent || (c.records > 0 && records != c.records) {
				t.Errorf("ackWait = %v, %d records, silent %s; want %v, %d, %s", waiting, records, silent, c.waiting, c.records, c.silent)
			}
		})
	}
	f := newInflight(100, 1<<20)
	f.add(10)
	if f.busySince.Load() == 0 {
		t.Error("add to an empty window did not record busySince")
	}
}
