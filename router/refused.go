package router

import (
	"strconv"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kgo"
)

// HeaderOriginalTopic names, on a dead-letter record of a record Kafka
// refused, the topic the record was meant for.
const HeaderOriginalTopic = "walbox_original_topic"

// Origin says where a dead-lettered record came from; it becomes the
// walbox_table, walbox_lsn and walbox_xid headers.
type Origin struct {
	// Table is "schema.table", or "pg_logical_emit_message.<prefix>" for an
	// outbox message.
	Table string
	// LSN is the WAL position of the row or message.
	LSN pglogrepl.LSN
	// XID is the writing transaction, 0 for a non-transactional message.
	XID uint32
}

// MessageTable is the walbox_table header value of an outbox message with
// the given prefix.
func MessageTable(prefix string) string { return "pg_logical_emit_message." + prefix }

// RefusedRecord is the dead-letter record, for topic, of orig: a record
// Kafka refused, or would refuse, for what it is (too large, invalid). It
// keeps orig's key and headers and adds the walbox_* headers, reason among
// them. The value is dropped when dropValue is set (a size refusal: the
// value would be refused again); the row stays in the table or WAL, and the
// headers say where. It keeps orig's timestamp (the row's commit time).
// orig is not modified. Safe for concurrent use.
func RefusedRecord(orig *kgo.Record, from Origin, topic, reason string, dropValue bool) *kgo.Record {
	value := orig.Value
	if dropValue {
		value = nil
	}
	headers := make([]kgo.RecordHeader, 0, len(orig.Headers)+5)
	headers = append(headers, orig.Headers...)
	headers = append(headers,
		kgo.RecordHeader{Key: HeaderError, Value: []byte(reason)},
		kgo.RecordHeader{Key: HeaderTable, Value: []byte(from.Table)},
		kgo.RecordHeader{Key: HeaderLSN, Value: []byte(from.LSN.String())},
		kgo.RecordHeader{Key: HeaderXID, Value: []byte(strconv.FormatUint(uint64(from.XID), 10))},
		kgo.RecordHeader{Key: HeaderOriginalTopic, Value: []byte(orig.Topic)},
	)
	return &kgo.Record{Topic: topic, Key: orig.Key, Value: value, Headers: headers, Timestamp: orig.Timestamp}
}

// MessageDeadLetter is the dead-letter record, for topic, of an outbox
// message (pg_logical_emit_message) that cannot be routed: its content as
// the value, reason and origin as walbox_* headers, and commitTime, the
// commit time of its transaction, as its timestamp (zero for a
// non-transactional message, which has no commit: the producer then stamps
// it). content is not copied. Safe for concurrent use.
func MessageDeadLetter(topic string, content []byte, prefix string, lsn pglogrepl.LSN, xid uint32, commitTime time.Time, reason string) *kgo.Record {
	return &kgo.Record{Topic: topic, Value: content, Timestamp: commitTime, Headers: []kgo.RecordHeader{
		{Key: HeaderError, Value: []byte(reason)},
		{Key: HeaderTable, Value: []byte(MessageTable(prefix))},
		{Key: HeaderLSN, Value: []byte(lsn.String())},
		{Key: HeaderXID, Value: []byte(strconv.FormatUint(uint64(xid), 10))},
	}}
}
