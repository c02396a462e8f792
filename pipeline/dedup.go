package pipeline

// dedupWindow recognises events Postgres sends again after a reconnect
// that Kafka had already acknowledged in this process.
//
// It costs one slice store per produced record: the ids of the last N
// records are kept in a ring, and only when a session ends, after the
// producer has flushed so that every record is settled, are they turned into
// the set the next session's replay is checked against. Settled means
// acknowledged, except for records Kafka refused that wait to be
// dead-lettered: those are left out, and the replay produces them again. An earlier version added
// every ack to a hashicorp/golang-lru cache; that lock, map insert and list
// node per event took 9% of the CPU of a backlog drain, for a set consulted
// only after a reconnect. The bound is the same: N event ids.
//
// Only ids are kept, not the records, so the window costs about 64 bytes an
// entry and a record's memory is freed as soon as Kafka acknowledges it.
//
// Owned by the goroutine running Relay.Run (the loop, then the reconnect
// path).
type dedupWindow struct {
	ring   []string
	next   int
	replay map[string]struct{}
}

func newDedupWindow(n int) *dedupWindow {
	if n <= 0 {
		return nil
	}
	return &dedupWindow{ring: make([]string, n)}
}

// remember records the id of a produced event.
func (w *dedupWindow) remember(id string) {
	if w == nil || id == "" {
		return
	}
	w.ring[w.next] = id
	w.next++
	if w.next == len(w.ring) {
		w.next = 0
	}
}

// prepareReplay builds the set of acknowledged event ids for the session
// about to start. Call it only after the producer has flushed; unsettled
// names the records still waiting to be dead-lettered.
func (w *dedupWindow) prepareReplay(unsettled []rerouted) {
	if w == nil {
		return
	}
	w.replay = make(map[string]struct{}, len(w.ring))
	for _, id := range w.ring {
		if id != "" {
			w.replay[id] = struct{}{}
		}
	}
	for _, r := range unsettled {
		delete(w.replay, r.m.eventID)
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
