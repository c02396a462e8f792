package pipeline

import (
	"errors"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recordRejected reports whether Kafka refused a record for what it is
// (size, format, topic name) rather than for the state of the cluster or the
// client's permissions. Only such refusals are dead-lettered: retrying the
// record can never succeed, while an authorisation or missing-topic error
// is fixed by an operator and must stop walbox instead.
func recordRejected(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) ||
		errors.Is(err, kerr.RecordListTooLarge) ||
		errors.Is(err, kerr.InvalidRecord) ||
		errors.Is(err, kerr.CorruptMessage) ||
		errors.Is(err, kerr.InvalidTopicException)
}

func tooLarge(err error) bool {
	return errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge)
}

// The dead-letter record itself is built by router.RefusedRecord: every
// record shape is the router's.

// rerouteQueue carries refused records from promise callbacks to the loop.
type rerouteQueue struct {
	mu    sync.Mutex
	items []rerouted
}

type rerouted struct {
	rec *kgo.Record
	m   *inflightRecord
}

func (q *rerouteQueue) push(rec *kgo.Record, m *inflightRecord) {
	q.mu.Lock()
	q.items = append(q.items, rerouted{rec, m})
	q.mu.Unlock()
}

func (q *rerouteQueue) take() []rerouted {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	items := q.items
	q.items = nil
	return items
}
