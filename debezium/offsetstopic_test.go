package debezium

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A distributed Connect cluster's offsets topic: the last record of the
// connector's key is its offset, whatever partition holds it.
func TestReadOffsetsTopic(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "connect-offsets"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
	cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("connect-offsets"))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	key := OffsetKey("outbox-connector", "app")
	for _, r := range []*kgo.Record{
		{Key: key, Value: []byte(`{"lsn":100,"lsn_commit":90}`)},
		{Key: []byte(`["other",{"server":"x"}]`), Value: []byte(`{"lsn":5}`)},
		{Key: key, Value: []byte(`{"lsn":200,"lsn_commit":190,"txId":7}`)},
		{Key: []byte(`["gone",{"server":"y"}]`), Value: nil},
	} {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := ReadOffsetsTopic(ctx, opts, "connect-offsets")
	if err != nil {
		t.Fatal(err)
	}
	o, err := FindOffset(entries, "outbox-connector", "app")
	if err != nil {
		t.Fatal(err)
	}
	if o.LSN != 200 || o.LSNCommit != 190 || o.TxID != 7 {
		t.Errorf("offset = %+v, want the last one", o)
	}
	if _, err := FindOffset(entries, "gone", "y"); !errors.Is(err, ErrOffsets) {
		t.Errorf("deleted: %v", err)
	}
	if _, err := ReadOffsetsTopic(ctx, opts, "no-such-topic"); !errors.Is(err, ErrOffsets) {
		t.Errorf("missing topic: %v", err)
	}
}
