package pipeline

// dedupWindow recognises events Postgres sends again after a reconnect
// that Kafka had already acknowledged in this process.
//
// It costs one slice store per produced record: the last N records are kept
// in a ring, and only when a session ends (after the producer has flushed,
// so every record is settled) are the acknowledged ones turned into the set
// the next session's replay is checked against. An earlier version added
// every ack to a hashicorp/golang-lru cache; that lock, map insert and list
// node per event took 9% of the CPU of a backlog drain, for a set consulted
// only after a reconnect. The bound is the same: N event ids.
//
// Owned by the goroutine running Relay.Run (the loop, then the reconnect
// path); records' acked flags are set by promise callbacks.
type dedupWindow struct {
	ring   []*inflightRecord
	next   int
	replay map[string]struct{}
}

func newDedupWindow(n int) *dedupWindow {
	if n <= 0 {
		return nil
	}
	return &dedupWindow{ring: make([]*inflightRecord, n)}
}

// remember records a produced event that has an id.
func (w *dedupWindow) remember(m *inflightRecord) {
	if w == nil || m.eventID == "" {
		return
	}
	w.ring[w.next] = m
	w.next++
	if w.next == len(w.ring) {
		w.next = 0
	}
}

// prepareReplay builds the set of acknowledged event ids for the session
// about to start. Call it only after the producer has flushed.
func (w *dedupWindow) prepareReplay() {
	if w == nil {
		return
	}
	w.replay = make(map[string]struct{})
	for _, m := range w.ring {
		if m != nil && m.acked.Load() {
			w.replay[m.eventID] = struct{}{}
		}
	}
}

// seen reports whether id was acknowledged before the reconnect.
func (w *dedupWindow) seen(id string) bool {
	if w == nil || w.replay == nil {
		return false
	}
	_, ok := w.replay[id]
	return ok
}

// endReplay drops the replay set once the stream has passed everything
// received before the reconnect.
func (w *dedupWindow) endReplay() {
	if w != nil {
		w.replay = nil
	}
}
