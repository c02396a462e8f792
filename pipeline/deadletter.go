package pipeline

import (
	"errors"
	"fmt"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/router"
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

// deadLetterRecord describes a refused record on the dead-letter topic. The
// value is dropped when the refusal was about size, since it would be
// refused again; the row stays in the outbox table, and the headers say
// where (table, LSN, event id).
func deadLetterRecord(orig *kgo.Record, m *inflightRecord, topic string) *kgo.Record {
	value := orig.Value
	if errors.Is(m.rejected, kerr.MessageTooLarge) || errors.Is(m.rejected, kerr.RecordListTooLarge) {
		value = nil
	}
	headers := make([]kgo.RecordHeader, 0, len(orig.Headers)+5)
	headers = append(headers, orig.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: router.HeaderError, Value: []byte(fmt.Sprintf("kafka refused the record for topic %q (%d bytes): %v", orig.Topic, len(orig.Value), m.rejected))},
		kgo.RecordHeader{Key: router.HeaderTable, Value: []byte(m.table())},
		kgo.RecordHeader{Key: router.HeaderLSN, Value: []byte(m.lsn.String())},
		kgo.RecordHeader{Key: router.HeaderXID, Value: []byte(strconv.FormatUint(uint64(m.xid), 10))},
		kgo.RecordHeader{Key: "walbox_original_topic", Value: []byte(orig.Topic)},
	)
	return &kgo.Record{Topic: topic, Key: orig.Key, Value: value, Headers: headers}
}

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
