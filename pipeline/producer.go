package pipeline

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/plugin/kprom"
	"github.com/twmb/franz-go/plugin/kslog"
)

// KafkaConfig holds the producer settings walbox exposes.
type KafkaConfig struct {
	Brokers  []string
	ClientID string
	// Linger is how long a partition's batch waits for more records (0: send
	// at once). BatchMaxBytes caps a batch; zero keeps franz-go's default.
	Linger        time.Duration
	BatchMaxBytes int
	// MaxBufferedRecords must be at least the relay's MaxInflightRecords so
	// Produce never blocks the replication loop.
	MaxBufferedRecords int
	// TopicLimits, when set, is attached to the client (it describes topic
	// configs through it) and caps each topic's batches at the topic's
	// max.message.bytes once looked up. Give the same value to the relay
	// (Config.TopicLimits).
	TopicLimits *KafkaTopicLimits
	// TLS, when set, makes every broker connection use it; SASL, when set,
	// authenticates every connection (package kafkasec builds both).
	TLS  *tls.Config
	SASL sasl.Mechanism
	// TransactionalID, when set, makes the client a transactional producer
	// (Config.Delivery exactly-once); TransactionTimeout is then the
	// broker-side limit of one transaction (DefaultTransactionTimeout when
	// zero): an instance that dies with a transaction open holds back
	// read_committed consumers of its partitions at most this long, unless
	// a successor with the same id aborts it sooner.
	TransactionalID    string
	TransactionTimeout time.Duration
}

// DefaultTransactionTimeout is the transaction timeout of exactly-once
// mode. It bounds the time to produce one Kafka transaction, so also one
// Postgres transaction, however large; it must not exceed the brokers'
// transaction.max.timeout.ms (15m by default).
const DefaultTransactionTimeout = time.Minute

// connOpts returns the options that say how to reach and authenticate to
// the brokers; every client built from a KafkaConfig starts with them.
func (c KafkaConfig) connOpts() []kgo.Opt {
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(c.SASL))
	}
	return opts
}

// NewKafkaClient returns a franz-go client set up for the outbox guarantee:
//   - acks=all with the idempotent producer (franz-go's default, stated
//     explicitly): a broker failover neither loses nor duplicates a batch,
//     and per-partition order holds with several requests in flight;
//   - no record retry limit and no delivery timeout: a record is never given
//     up on because Kafka is down for a while; the relay stops confirming
//     instead and resumes by itself. Only when its replication session is
//     lost does the relay purge what Kafka has not acknowledged within a
//     bound (Config.LostSessionFlushTimeout), so that it cannot land after
//     what the slot's next holder sends;
//   - the sticky key partitioner with murmur2 hashing, the Java client's
//     default for keyed records, so an aggregate lands on the partition Java
//     producers and Kafka Streams expect. Changing the key encoding or this
//     partitioner moves aggregates between partitions and breaks their order
//     across the change.
func NewKafkaClient(c KafkaConfig, log *slog.Logger, reg prometheus.Registerer) (*kgo.Client, error) {
	if len(c.Brokers) == 0 {
		return nil, fmt.Errorf("kafka: no brokers configured; set --kafka-brokers (WALBOX_KAFKA_BROKERS)")
	}
	opts := append(c.connOpts(),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
		kgo.WithLogger(kafkaLogger(c, log)),
		// Like the Java producer (allow.auto.create.topics=true): the
		// broker's auto.create.topics.enable decides. With it off, a
		// missing topic fails the record with UNKNOWN_TOPIC_OR_PARTITION
		// and walbox stops naming the topic.
		kgo.AllowAutoTopicCreation(),
		kgo.ProducerLinger(c.Linger),
		// franz-go waits 5s by default between metadata loads; a topic
		// the broker has just auto-created would stall produces that long.
		kgo.MetadataMinAge(500*time.Millisecond),
	)
	batchMax := int32(DefaultConfig().MaxBatchBytes)
	if c.BatchMaxBytes > 0 {
		batchMax = int32(c.BatchMaxBytes)
	}
	if c.TopicLimits != nil {
		opts = append(opts, kgo.ProducerBatchMaxBytesFn(c.TopicLimits.batchMaxBytes(batchMax)))
	} else if c.BatchMaxBytes > 0 {
		opts = append(opts, kgo.ProducerBatchMaxBytes(batchMax))
	}
	if c.MaxBufferedRecords > 0 {
		opts = append(opts, kgo.MaxBufferedRecords(c.MaxBufferedRecords))
	}
	if reg != nil {
		opts = append(opts, kgo.WithHooks(kprom.NewMetrics("walbox_kafka", kprom.Registerer(reg))))
	}
	opts = append(opts, kgo.WithHooks(newBrokerWatch(log, reg))) // kafkalog.go
	if c.TransactionalID != "" {
		opts = append(opts, kgo.TransactionalID(c.TransactionalID),
			kgo.TransactionTimeout(cmpOr(c.TransactionTimeout, DefaultTransactionTimeout)))
	} else {
		// Lets the relay purge records whose produce request is out but
		// unanswered when a replication session is lost (Relay's
		// flushLostSession); without it franz-go waits for their answer,
		// however long a partition lasts. The price is a possible
		// duplicate of such a record, which at-least-once accepts: the
		// slot's next holder sends it again anyway. Nothing else cancels
		// a record: no delivery timeout, no retry limit, no context.
		opts = append(opts, kgo.AllowIdempotentProduceCancellation())
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("kafka: create client for brokers %v: %w", c.Brokers, err)
	}
	if c.TopicLimits != nil {
		c.TopicLimits.attach(cl)
	}
	return cl, nil
}

// BrokerMessageMaxBytes asks one broker for message.max.bytes: the largest
// record batch the brokers accept. walbox caps its batches at it, so that a
// record too large for Kafka is refused alone, by the client, instead of
// getting a whole batch of innocent records refused with it.
// It connects with c's brokers, TLS and SASL.
func BrokerMessageMaxBytes(ctx context.Context, c KafkaConfig) (int, error) {
	return brokerConfigInt(ctx, c, "message.max.bytes")
}

// CheckTransactionTimeout compares the transaction timeout d (0: the
// default) with the brokers' transaction.max.timeout.ms: a larger one makes
// every producer id load fail with INVALID_TRANSACTION_TIMEOUT, so it is
// refused before walbox streams (*TransactionTimeoutError). Other errors
// mean the brokers could not be asked (down, or no DescribeConfigs
// permission); the caller may go on.
func CheckTransactionTimeout(ctx context.Context, c KafkaConfig, d time.Duration) error {
	d = cmpOr(d, DefaultTransactionTimeout)
	ms, err := brokerConfigInt(ctx, c, "transaction.max.timeout.ms")
	if err != nil {
		return err
	}
	if limit := time.Duration(ms) * time.Millisecond; d > limit {
		return &TransactionTimeoutError{Timeout: d, BrokerMax: limit}
	}
	return nil
}

// brokerConfigInt asks one broker for the integer config key.
func brokerConfigInt(ctx context.Context, c KafkaConfig, key string) (int, error) {
	cl, err := kgo.NewClient(c.connOpts()...)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("kafka metadata: %w", err)
	}
	if len(meta.Brokers) == 0 {
		return 0, errors.New("kafka metadata lists no brokers")
	}
	id := meta.Brokers[0].NodeID
	rcs, err := adm.DescribeBrokerConfigs(ctx, id)
	if err != nil {
		return 0, fmt.Errorf("describe configs of broker %d: %w", id, err)
	}
	rc, err := rcs.On(strconv.Itoa(int(id)), nil)
	if err != nil {
		return 0, fmt.Errorf("describe configs of broker %d: %w", id, err)
	}
	for _, c := range rc.Configs {
		if c.Key == key && c.Value != nil {
			n, err := strconv.Atoi(*c.Value)
			if err != nil {
				return 0, fmt.Errorf("broker %d %s %q: %w", id, key, *c.Value, err)
			}
			return n, nil
		}
	}
	return 0, fmt.Errorf("broker %d does not report %s", id, key)
}

func cmpOr(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// kafkaLogger bridges franz-go's log into log; a transactional client's
// per-transaction lines go to debug (routineTxnLogger).
func kafkaLogger(c KafkaConfig, log *slog.Logger) kgo.Logger {
	l := quietKafkaLogger{kslog.New(log.With("component", "kafka"))} // kafkalog.go
	if c.TransactionalID == "" {
		return l
	}
	return routineTxnLogger{l}
}

// routineTxnLogger logs franz-go's per-transaction messages at debug level:
// at info, exactly-once mode would log four lines per Kafka transaction,
// several times a second.
type routineTxnLogger struct{ kgo.Logger }

var routineTxnMessages = map[string]bool{
	"beginning transaction": true,
	"flushing":              true,
	"flushed":               true,
	"ending transaction":    true,
	"end transaction response successfully received": true,
}

func (l routineTxnLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level == kgo.LogLevelInfo && routineTxnMessages[msg] {
		level = kgo.LogLevelDebug
	}
	l.Logger.Log(level, msg, keyvals...)
}
