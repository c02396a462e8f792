//go:build linux

package kafkatest

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/fulltest"
)

// TestClusterReplicatesAndSurvivesFaults is the cluster harness's own
// acceptance test: three nodes, replication factor 3 and
// min.insync.replicas=2 on an auto-created topic and on the internal
// topics, acks=all writes through a SIGKILL of the partition leader, and a
// controller failover.
func TestClusterReplicatesAndSurvivesFaults(t *testing.T) {
	fulltest.Require(t, "a three-node cluster started and faulted")
	started := time.Now()
	c := StartCluster(t)
	t.Logf("cluster of %d nodes ready in %s", c.Nodes(), time.Since(started).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	const topic, txnID, group = "cluster-t", "cluster-txn", "cluster-g"
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic(topic), kgo.ConsumeTopics(topic), kgo.ConsumerGroup(group),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	// Partitions and replication factor left to the broker's defaults.
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, -1, -1, nil, topic); err != nil {
		t.Fatal(err)
	}
	produce := func(n int) {
		t.Helper()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := cl.ProduceSync(ctx, kgo.StringRecord(strconv.Itoa(i))).FirstErr(); err != nil {
				t.Fatalf("produce: %v", err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit: %v", err)
		}
	}
	produce(10)
	for got := 0; got < 10; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		got += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		t.Fatal(err)
	}

	adm := kadm.NewClient(cl)
	td, err := adm.ListTopicsWithInternal(ctx, topic, "__transaction_state", "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	cfgs, err := adm.DescribeTopicConfigs(ctx, topic, "__transaction_state", "__consumer_offsets")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{topic, "__transaction_state", "__consumer_offsets"} {
		d, ok := td[name]
		if !ok || d.Err != nil || len(d.Partitions) == 0 {
			t.Fatalf("topic %s: %+v", name, d)
		}
		for _, p := range d.Partitions {
			if len(p.Replicas) != 3 {
				t.Errorf("%s[%d] has replicas %v, want 3", name, p.Partition, p.Replicas)
			}
		}
		rc, err := cfgs.On(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		isr := ""
		for _, cv := range rc.Configs {
			if cv.Key == "min.insync.replicas" {
				isr = cv.MaybeValue()
			}
		}
		if isr != "2" {
			t.Errorf("%s: min.insync.replicas = %q, want 2", name, isr)
		}
	}

	coord, err := c.TxnCoordinator(ctx, txnID)
	if err != nil {
		t.Fatal(err)
	}
	leader, err := c.Leader(ctx, topic, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%s[0] led by node %d; transaction coordinator of %s: node %d", topic, leader, txnID, coord)
	if err := c.Node(leader).Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	produce(10) // two replicas of three are enough for acks=all
	t.Logf("a transaction committed %s after SIGKILL of the leader", time.Since(killed).Round(time.Millisecond))
	if err := c.Node(leader).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitInSync(ctx); err != nil {
		t.Fatal(err)
	}

	ctrl, err := c.ActiveController(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Node(ctrl).Stop(ctx); err != nil {
		t.Fatal(err)
	}
	next, err := c.ActiveController(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if next == ctrl {
		t.Fatalf("active controller still node %d after it stopped", next)
	}
	produce(10)
	if err := c.Node(ctrl).Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitInSync(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("controller failover node %d -> %d; whole test %s", ctrl, next, time.Since(started).Round(time.Millisecond))
}
