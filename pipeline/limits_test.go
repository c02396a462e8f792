package pipeline

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestRecordBatchBytesMatchesKafka: the size walbox checks is the size a
// broker measures a single-record batch at (kfake measures it as Kafka
// does: the whole v2 batch). At that limit the record is accepted; one byte
// below, refused.
func TestRecordBatchBytesMatchesKafka(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.RecordRetries(0))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	records := []struct {
		name string
		rec  *kgo.Record
	}{
		{name: "null key, no headers", rec: &kgo.Record{Value: []byte("v")}},
		{name: "key and headers", rec: &kgo.Record{Key: []byte("order-1"), Value: []byte(`{"a":1}`),
			Headers: []kgo.RecordHeader{{Key: "event_id", Value: []byte("e1")}, {Key: "empty"}}}},
		{name: "multi-byte varints", rec: &kgo.Record{Key: []byte(strings.Repeat("k", 200)), Value: []byte(strings.Repeat("v", 20000)),
			Headers: []kgo.RecordHeader{{Key: strings.Repeat("h", 130), Value: []byte(strings.Repeat("x", 70000))}}}},
	}
	for i, tt := range records {
		t.Run(tt.name, func(t *testing.T) {
			size := recordBatchBytes(tt.rec)
			for _, limit := range []int64{size, size - 1} {
				topic := "t" + strconv.Itoa(i) + "-" + strconv.FormatInt(limit, 10)
				v := strconv.FormatInt(limit, 10)
				if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, topic); err != nil {
					t.Fatal(err)
				}
				rec := *tt.rec
				rec.Topic = topic
				err := cl.ProduceSync(ctx, &rec).FirstErr()
				if limit == size && err != nil {
					t.Fatalf("refused at a limit of its computed size %d: %v", size, err)
				}
				if limit < size && !errors.Is(err, kerr.MessageTooLarge) {
					t.Fatalf("at a limit of %d, one below its computed size: err = %v, want MESSAGE_TOO_LARGE", limit, err)
				}
			}
		})
	}
}

// TestKafkaTopicLimits: the kadm implementation reads a topic's own
// max.message.bytes or the brokers' default, reports a missing topic, and
// caps the client's batches for a topic it looked up.
func TestKafkaTopicLimits(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	limits := NewKafkaTopicLimits()
	if _, err := limits.MaxMessageBytes(context.Background(), "t"); err == nil {
		t.Fatal("an unattached KafkaTopicLimits answered")
	}
	cl, err := NewKafkaClient(KafkaConfig{Brokers: c.ListenAddrs(), TopicLimits: limits}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	v := "5000"
	adm := kadm.NewClient(cl)
	if _, err := adm.CreateTopic(ctx, 1, 1, map[string]*string{"max.message.bytes": &v}, "small"); err != nil {
		t.Fatal(err)
	}
	if _, err := adm.CreateTopic(ctx, 1, 1, nil, "default"); err != nil {
		t.Fatal(err)
	}
	if n, err := limits.MaxMessageBytes(ctx, "small"); err != nil || n != 5000 {
		t.Fatalf("small: %d, %v; want 5000", n, err)
	}
	if n, err := limits.MaxMessageBytes(ctx, "default"); err != nil || n != 1048588 {
		t.Fatalf("default: %d, %v; want the brokers' 1048588", n, err)
	}
	if _, err := limits.MaxMessageBytes(ctx, "missing"); !errors.Is(err, kerr.UnknownTopicOrPartition) {
		t.Fatalf("missing topic: err = %v, want UNKNOWN_TOPIC_OR_PARTITION", err)
	}
	fn := limits.batchMaxBytes(1000012)
	if got := fn("small"); got != 5000 {
		t.Errorf("batch cap of small = %d, want 5000", got)
	}
	if got := fn("default"); got != 1000012 {
		t.Errorf("batch cap of default = %d, want the producer's 1000012", got)
	}
	if got := fn("never-looked-up"); got != 1000012 {
		t.Errorf("batch cap of an unknown topic = %d, want 1000012", got)
	}
}
