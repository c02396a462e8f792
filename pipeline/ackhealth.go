package pipeline

import "time"

// AckStallAfter is how long records may wait for Kafka's acknowledgement,
// with none arriving, before AckWait reports them: longer than a single
// broker's crash usually holds acks up (the controller fences a dead
// broker after Kafka's 9 s broker.session.timeout.ms; the cluster tests
// measured up to 14 s of delivery gap through a crash), shorter than a lost
// quorum.
const AckStallAfter = 15 * time.Second

// AckWait reports whether records are waiting for Kafka's acknowledgement
// while none has been acknowledged for AckStallAfter or longer: how many
// wait, their bytes, and for how long nothing was acknowledged (since the
// last acknowledgement, or since the first of these records was produced
// if that is later; the oldest unacknowledged record has waited at least
// that long). A broker answering a ping says nothing of this: with two of
// three brokers down, or fewer than min.insync.replicas in sync, the one
// left answers while no record is acknowledged. It backs /readyz. Safe for
// concurrent use.
func (r *Relay) AckWait() (waiting bool, records, bytes int64, silent time.Duration) {
	return r.inflight.ackWait(time.Now())
}

func (f *inflight) ackWait(now time.Time) (waiting bool, records, bytes int64, silent time.Duration) {
	records, bytes = f.records.Load(), f.bytes.Load()
	if records <= 0 {
		return false, 0, 0, 0
	}
	since := max(f.lastAck.Load(), f.busySince.Load())
	if since == 0 {
		return false, records, bytes, 0
	}
	silent = now.Sub(time.Unix(0, since))
	return silent >= AckStallAfter, records, bytes, silent
}

// acked records that Kafka acknowledged a record now.
func (f *inflight) acked() { f.lastAck.Store(time.Now().UnixNano()) }
