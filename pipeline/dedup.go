package pipeline

import (
	"math"

	"github.com/jackc/pglogrepl"
)

// replayKey identifies one change of the stream by what Postgres
// guarantees: the commit LSN of its transaction and its position among the
// changes and messages of that transaction. Decoding the same transaction
// again yields the same keys, whatever the rows contain; an event id column
// is the writer's choice and may repeat.
//
// A non-transactional message has no transaction: its key is its own LSN
// with ordinal nonTransactional, which no transaction's change can have.
type replayKey struct {
	commit pglogrepl.LSN
	ord    uint32
}

// nonTransactional is the ordinal of a non-transactional message's key.
const nonTransactional = math.MaxUint32

// dedupWindow recognises changes Postgres sends again after a reconnect
// whose records Kafka had already acknowledged in this process.
//
// It costs one 16-byte store per produced record: the keys of the last N
// records are kept in a ring, and only when a session ends, after the
// producer has flushed so that every record is settled, are they turned into
// the set the next session's replay is checked against. Settled means
// acknowledged, except for records Kafka refused that wait to be
// dead-lettered: those are left out, and the replay produces them again. An
// earlier version added every ack to a hashicorp/golang-lru cache; that
// lock, map insert and list node per event took 9% of the CPU of a backlog
// drain, for a set consulted only after a reconnect. The bound is the same:
// N keys.
//
// Only keys are kept, not the records, so the window costs 16 bytes an entry
// and a record's memory is freed as soon as Kafka acknowledges it.
//
// Owned by the goroutine running Relay.Run (the loop, then the reconnect
// path).
type dedupWindow struct {
	ring   []replayKey
	next   int
	replay map[replayKey]struct{}
}

func newDedupWindow(n int) *dedupWindow {
	if n <= 0 {
		return nil
	}
	return &dedupWindow{ring: make([]replayKey, n)}
}

// remember records the key of a produced record.
func (w *dedupWindow) remember(k replayKey) {
	if w == nil {
		return
	}
	w.ring[w.next] = k
	w.next++
	if w.next == len(w.ring) {
		w.next = 0
	}
}

// prepareReplay builds the set of acknowledged keys for the session about to
// start. Call it only after the producer has flushed; unsettled names the
// records still waiting to be dead-lettered.
func (w *dedupWindow) prepareReplay(unsettled []rerouted) {
	if w == nil {
		return
	}
	w.replay = make(map[replayKey]struct{}, len(w.ring))
	for _, k := range w.ring {
		if k.commit != 0 { // a commit LSN is never 0; 0 is an empty slot
			w.replay[k] = struct{}{}
		}
	}
	for _, r := range unsettled {
		delete(w.replay, r.m.key)
	}
}

// seen reports whether the record of k was acknowledged before the reconnect.
func (w *dedupWindow) seen(k replayKey) bool {
	if w == nil || w.replay == nil {
		return false
	}
	_, ok := w.replay[k]
	return ok
}

// endReplay drops the replay set once the stream has passed every
// transaction received before the reconnect.
func (w *dedupWindow) endReplay() {
	if w != nil {
		w.replay = nil
	}
}

// forgetFrom drops the keys of transactions committed at or after from,
// from the ring and from the replay set: after a timeline switch those LSNs
// name other transactions, which must be produced.
func (w *dedupWindow) forgetFrom(from pglogrepl.LSN) {
	if w == nil {
		return
	}
	for i, k := range w.ring {
		if k.commit >= from {
			w.ring[i] = replayKey{}
		}
	}
	for k := range w.replay {
		if k.commit >= from {
			delete(w.replay, k)
		}
	}
}
