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

// An exactly-once Connect cluster (exactly.once.source.support=enabled)
// writes offsets in transactions, so a partition of its offsets topic ends
// with a transaction marker, and an aborted transaction's offsets are in
// the log too. walbox read to the high watermark without read_committed:
// it waited for a record at end-1 that is never returned (the marker) until
// the takeover timed out, and would have taken an aborted offset.
func TestReadOffsetsTopicTransactional(t *testing.T) {
	key := OffsetKey("outbox-connector", "app")
	type txn struct {
		value  string
		commit bool
	}
	for _, tt := range []struct {
		name string
		txns []txn
		want int64 // the lsn walbox must read
	}{
		{name: "aborted last", txns: []txn{{`{"lsn":100}`, true}, {`{"lsn":200}`, true}, {`{"lsn":999}`, false}}, want: 200},
		{name: "aborted between", txns: []txn{{`{"lsn":100}`, true}, {`{"lsn":999}`, false}, {`{"lsn":300}`, true}}, want: 300},
		{name: "committed only", txns: []txn{{`{"lsn":100}`, true}}, want: 100},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// Well below the takeover's 60 s: the old reader hung until its
			// context ended.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "connect-offsets"))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			opts := []kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}
			cl, err := kgo.NewClient(append(opts, kgo.DefaultProduceTopic("connect-offsets"), kgo.TransactionalID("connect-cluster-outbox-connector"))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for _, x := range tt.txns {
				if err := cl.BeginTransaction(); err != nil {
					t.Fatal(err)
				}
				if err := cl.ProduceSync(ctx, &kgo.Record{Key: key, Value: []byte(x.value)}).FirstErr(); err != nil {
					t.Fatal(err)
				}
				if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(x.commit)); err != nil {
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
			if int64(o.LSN) != tt.want {
				t.Errorf("lsn = %d, want %d (entries %q)", o.LSN, tt.want, entries)
			}
		})
	}
}
