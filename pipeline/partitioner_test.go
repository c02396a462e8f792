package pipeline_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/pipeline"
)

// javaMurmur2 is a transcription of org.apache.kafka.common.utils.Utils.murmur2,
// which the Java producer's default partitioner applies to a record key.
func javaMurmur2(data []byte) int32 {
	const (
		seed = uint32(0x9747b28c)
		m    = uint32(0x5bd1e995)
		r    = 24
	)
	n := len(data)
	h := seed ^ uint32(n)
	for i := 0; i+4 <= n; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[n&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// javaPartition is Utils.toPositive(Utils.murmur2(key)) % numPartitions.
func javaPartition(key []byte, partitions int32) int32 {
	return (javaMurmur2(key) & 0x7fffffff) % partitions
}

func TestJavaMurmur2Vectors(t *testing.T) {
	// Expected values from Kafka's UtilsTest.testMurmur2.
	tests := []struct {
		key  string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	}
	for _, tt := range tests {
		if got := javaMurmur2([]byte(tt.key)); got != tt.want {
			t.Errorf("murmur2(%q) = %d, want %d", tt.key, got, tt.want)
		}
	}
}

// TestKeyPartitionMatchesJavaClient is a property test: for random aggregate
// ids and partition counts, walbox's producer puts the record on the
// partition the Java client's default partitioner would. If this breaks,
// aggregates move between partitions and consumers see them out of order
// across an upgrade.
func TestKeyPartitionMatchesJavaClient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(7, "p7"), kfake.SeedTopics(12, "p12"), kfake.SeedTopics(1, "p1"))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	cl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: cluster.ListenAddrs()}, slog.New(slog.NewTextHandler(io.Discard, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	topics := map[string]int32{"p7": 7, "p12": 12, "p1": 1}
	for i := 0; i < 600; i++ {
		key := make([]byte, rng.IntN(40))
		for j := range key {
			key[j] = byte(rng.IntN(256))
		}
		if i%3 == 0 { // realistic ids too
			key = []byte(fmt.Sprintf("order-%d", rng.IntN(1_000_000)))
		}
		topic := []string{"p7", "p12", "p1"}[i%3]
		res := cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Key: key, Value: []byte("v")})
		rec, err := res.First()
		if err != nil {
			t.Fatal(err)
		}
		if want := javaPartition(key, topics[topic]); rec.Partition != want {
			t.Fatalf("key %q on %s: partition %d, Java client would use %d", key, topic, rec.Partition, want)
		}
	}
}
