package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/router"
)

// A record Kafka refuses for good after later records of the same key were
// acknowledged breaks the key's order on the next start (R2 R3, then R1 R2
// R3). The common refusal, size, is therefore decided before producing, in
// stream order: a record too large for its topic is dead-lettered in place
// or stops the relay before it, with everything before it confirmed.
// Refusals that remain after the fact (a limit lowered while running,
// InvalidRecord, authorisation) keep the settle path.

// TopicLimits looks up how large a record batch a topic accepts.
// Implementations must be safe for concurrent use.
type TopicLimits interface {
	// MaxMessageBytes returns the topic's effective max.message.bytes (its
	// own setting, or the brokers' message.max.bytes it inherits).
	MaxMessageBytes(ctx context.Context, topic string) (int, error)
}

// KafkaTopicLimits is the TopicLimits walbox runs with. Give it to
// NewKafkaClient (KafkaConfig.TopicLimits) and to the relay
// (Config.TopicLimits): it describes topic configs through that client, and
// caps the client's record batches for each topic at the limit found, so
// that a batch of small records is not refused for its size either. Safe
// for concurrent use.
type KafkaTopicLimits struct {
	adm   atomic.Pointer[kadm.Client]
	found sync.Map // topic → int32, the limits looked up so far
}

var _ TopicLimits = (*KafkaTopicLimits)(nil)

// NewKafkaTopicLimits returns a KafkaTopicLimits not yet attached to a
// client; NewKafkaClient attaches it. It needs DESCRIBE_CONFIGS on the
// topics; without it every lookup fails and the relay falls back to the
// producer batch limit.
func NewKafkaTopicLimits() *KafkaTopicLimits { return &KafkaTopicLimits{} }

func (k *KafkaTopicLimits) attach(cl *kgo.Client) { k.adm.Store(kadm.NewClient(cl)) }

// MaxMessageBytes describes topic's configs and returns its effective
// max.message.bytes.
func (k *KafkaTopicLimits) MaxMessageBytes(ctx context.Context, topic string) (int, error) {
	adm := k.adm.Load()
	if adm == nil {
		return 0, errors.New("pipeline: KafkaTopicLimits is not attached to a client: pass it to NewKafkaClient in KafkaConfig.TopicLimits")
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describe configs of topic %q: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		return 0, fmt.Errorf("describe configs of topic %q: %w", topic, err)
	}
	if rc.Err != nil {
		return 0, fmt.Errorf("describe configs of topic %q: %w", topic, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			n, err := strconv.Atoi(*c.Value)
			if err != nil || n <= 0 {
				return 0, fmt.Errorf("topic %q max.message.bytes %q is not a positive integer", topic, *c.Value)
			}
			k.found.Store(topic, int32(min(n, math.MaxInt32)))
			return n, nil
		}
	}
	return 0, fmt.Errorf("topic %q: the brokers do not report max.message.bytes", topic)
}

// batchMaxBytes is the client's kgo.ProducerBatchMaxBytesFn: def, or the
// topic's limit when it is lower. The relay looks a topic up before its
// first record is produced, so the limit is known when franz-go first asks
// (once per partition, when it discovers it).
func (k *KafkaTopicLimits) batchMaxBytes(def int32) func(string) int32 {
	return func(topic string) int32 {
		if v, ok := k.found.Load(topic); ok {
			// franz-go refuses a cap below 512 for the whole topic;
			// such a limit leaves the per-record check to decide.
			if n := v.(int32); n < def && n >= 512 {
				return n
			}
		}
		return def
	}
}

// maxCachedTopicLimits bounds the topics whose limit is remembered; topics
// routed from a column are the writers' choice.
const maxCachedTopicLimits = 4096

// topicLimitLookupTimeout bounds one lookup, made in the replication loop.
const topicLimitLookupTimeout = 10 * time.Second

// topicLimitCache holds each topic's limit, looked up once. Owned by the
// goroutine running Relay.Run.
type topicLimitCache struct {
	byTopic map[string]topicLimit
	// last is the topic of the previous record: most streams go to few
	// topics, and the router interns their names, so the comparison is
	// usually a pointer check.
	lastTopic      string
	last           topicLimit
	fallbackLogged bool

	// A lookup that failed is tried again in the background, one at a
	// time: the topic already has its fallback, and a Kafka that does not
	// answer (brokers frozen, a lost quorum) would otherwise hold the loop
	// for topicLimitLookupTimeout every topicLimitRetry, acknowledgements
	// and the replication stream included. retrying is the topic being
	// looked up ("" when none), retried its result (the goroutine's last
	// act, so receiving it is waiting for the goroutine) and cancel ends
	// it early: wait (Relay.Run, before it returns) does not let a Kafka
	// that does not answer hold up the stop.
	retrying string
	retried  chan limitRetry
	cancel   context.CancelFunc
}

// limitRetry is the result of a background lookup.
type limitRetry struct {
	topic string
	n     int
	err   error
}

type topicLimit struct {
	bytes int
	// source says where bytes comes from, for the error and log line.
	source string
	// retryAt, when set, is when a lookup that failed is tried again:
	// the topic may not have existed yet (auto-created by its first
	// produce) or Kafka may have been unreachable.
	retryAt time.Time
}

// topicLimitRetry is how long after a failed lookup a topic's limit is
// looked up again. A variable for tests.
var topicLimitRetry = 30 * time.Second

// batchLimitSource names the producer batch limit in errors and logs.
const batchLimitSource = "the producer batch limit (--producer-batch-max-bytes, capped at the brokers' message.max.bytes)"

// limitFor returns the largest record batch topic accepts, as far as
// walbox knows: the topic's max.message.bytes when TopicLimits can say, and
// never more than the producer's batch limit (MaxBatchBytes, which walbox
// run caps at the brokers' message.max.bytes), which franz-go enforces
// itself. A topic's first lookup is made here, before its first record; a
// failed one is retried in the background (retryLimit) and the topic keeps
// the batch limit until one works.
func (l *loop) limitFor(topic string) topicLimit {
	c := l.limits
	if c.retrying != "" {
		select {
		case r := <-c.retried:
			l.learnedLimit(r)
		default:
		}
	}
	if topic == c.lastTopic && c.last.bytes != 0 && (c.last.retryAt.IsZero() || time.Now().Before(c.last.retryAt)) {
		return c.last
	}
	prev, known := c.byTopic[topic]
	if known && (prev.retryAt.IsZero() || time.Now().Before(prev.retryAt)) {
		c.lastTopic, c.last = topic, prev
		return prev
	}
	if known {
		// A retry is due: the fallback holds meanwhile; a topic whose
		// turn does not come now (another lookup is out) is asked at
		// the next interval.
		l.retryLimit(topic)
		prev.retryAt = time.Now().Add(topicLimitRetry)
		c.byTopic[topic] = prev
		c.lastTopic, c.last = topic, prev
		return prev
	}
	lim := topicLimit{bytes: l.cfg.MaxBatchBytes, source: batchLimitSource}
	if l.cfg.TopicLimits != nil {
		ctx, cancel := context.WithTimeout(l.produceCtx, topicLimitLookupTimeout)
		n, err := l.cfg.TopicLimits.MaxMessageBytes(ctx, topic)
		cancel()
		switch {
		case err != nil:
			// A topic that does not exist yet is created with the
			// brokers' default, which the batch limit already follows.
			// Said once: a missing permission fails every topic alike.
			// Looked up again every topicLimitRetry: a topic
			// auto-created by its first record exists by then.
			if !c.fallbackLogged {
				l.log.Warn("could not read a topic's max.message.bytes; checking its records against the producer batch limit instead, and asking again every "+topicLimitRetry.String()+" (logged once)",
					"topic", topic, "err", err, "limit_bytes", lim.bytes)
			}
			c.fallbackLogged = true
			lim.retryAt = time.Now().Add(topicLimitRetry)
		case n < lim.bytes:
			lim = topicLimit{bytes: n, source: "the topic's max.message.bytes"}
		}
	}
	c.remember(topic, lim)
	return lim
}

func (c *topicLimitCache) remember(topic string, lim topicLimit) {
	if c.byTopic == nil || len(c.byTopic) >= maxCachedTopicLimits {
		c.byTopic = make(map[string]topicLimit)
	}
	c.byTopic[topic] = lim
	c.lastTopic, c.last = topic, lim
}

// retryLimit looks topic up again in the background, unless a lookup is
// already out.
func (l *loop) retryLimit(topic string) {
	c := l.limits
	if c.retrying != "" {
		return
	}
	if c.retried == nil {
		c.retried = make(chan limitRetry, 1)
	}
	c.retrying = topic
	ctx, cancel := context.WithTimeout(l.produceCtx, topicLimitLookupTimeout)
	c.cancel = cancel
	lookup := l.cfg.TopicLimits
	go func() {
		n, err := lookup.MaxMessageBytes(ctx, topic)
		c.retried <- limitRetry{topic: topic, n: n, err: err}
	}()
}

// learnedLimit takes a background lookup's result: a failed one leaves the
// fallback to its next interval.
func (l *loop) learnedLimit(r limitRetry) {
	c := l.limits
	c.retrying = ""
	c.cancel()
	if r.err != nil {
		return
	}
	lim := topicLimit{bytes: l.cfg.MaxBatchBytes, source: batchLimitSource}
	if r.n < lim.bytes {
		lim = topicLimit{bytes: r.n, source: "the topic's max.message.bytes"}
	}
	last, lastLim := c.lastTopic, c.last
	c.remember(r.topic, lim)
	if last != r.topic {
		c.lastTopic, c.last = last, lastLim
	}
	l.log.Info("learned a topic's max.message.bytes after an earlier lookup failed (the topic did not exist yet, say)",
		"topic", r.topic, "max_message_bytes", r.n, "limit_bytes", lim.bytes)
}

// wait ends the background lookup, if one is out, and waits for it; its
// result is dropped.
func (c *topicLimitCache) wait() {
	if c.retrying != "" {
		c.cancel()
		<-c.retried
		c.retrying = ""
	}
}

// checkSize decides, before producing, a record Kafka would refuse as too
// large: under the dead-letter policy it returns the dead-letter record to
// produce in its place (m is marked dead-lettered); otherwise it returns a
// *ProduceError that stops the relay before the record, once everything
// before it is confirmed. A record within the limit is returned as is.
func (l *loop) checkSize(rec *kgo.Record, m *inflightRecord) (*kgo.Record, error) {
	size := recordBatchBytes(rec)
	lim := l.limitFor(rec.Topic)
	if size <= int64(lim.bytes) {
		return rec, nil
	}
	if l.cfg.DeadLetterTopic == "" || (m.deadLetter && rec.Value == nil) {
		return nil, &ProduceError{Topic: rec.Topic, EventID: m.eventID, LSN: m.lsn, Checked: true,
			Err: fmt.Errorf("%w: the record is %d bytes as a record batch of one, over the limit of %d bytes: %s; checked before producing, so nothing after it was sent",
				kerr.MessageTooLarge, size, lim.bytes, lim.source)}
	}
	reason := fmt.Sprintf("the record for topic %q is too large for Kafka (%d bytes as a record batch of one, over the limit of %d bytes: %s; checked before producing, not sent): %v",
		rec.Topic, size, lim.bytes, lim.source, kerr.MessageTooLarge)
	l.log.Warn("outbox record too large for Kafka; routed to the dead-letter topic without its value",
		"event_id", m.eventID, "lsn", m.lsn.String(), "xid", m.xid, "topic", rec.Topic,
		"size_bytes", size, "limit_bytes", lim.bytes, "dead_letter_topic", l.cfg.DeadLetterTopic)
	m.deadLetter = true
	return router.RefusedRecord(rec, m.origin(), l.cfg.DeadLetterTopic, reason, true), nil
}

// recordBatchBytes is the size of rec alone in a v2 record batch, what a
// broker compares with max.message.bytes (before compression, so never
// less than what it sees, except for incompressible data, which franz-go
// then sends uncompressed). The batch header is 61 bytes; the record is its
// length, attributes, timestamp and offset deltas (0 in a batch of one),
// key, value and headers, each length a zigzag varint.
func recordBatchBytes(rec *kgo.Record) int64 {
	n := 1 + 1 + 1 // attributes, timestamp delta, offset delta
	n += bytesField(rec.Key, rec.Key == nil) + bytesField(rec.Value, rec.Value == nil)
	n += varintLen(int64(len(rec.Headers)))
	for _, h := range rec.Headers {
		n += varintLen(int64(len(h.Key))) + len(h.Key) + bytesField(h.Value, h.Value == nil)
	}
	return int64(61 + varintLen(int64(n)) + n)
}

func bytesField(b []byte, null bool) int {
	if null {
		return varintLen(-1)
	}
	return varintLen(int64(len(b))) + len(b)
}

// varintLen is the length of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
