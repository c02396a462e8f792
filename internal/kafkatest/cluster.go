package kafkatest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Cluster is a throwaway multi-node KRaft cluster as production runs it:
// every node a broker and a voting controller (one JVM each, combined
// mode), replication factor 3 and min.insync.replicas=2 for every topic,
// the internal ones (__consumer_offsets, __transaction_state) included.
// Each node is a *Broker, so Kill (SIGKILL), Stop (SIGTERM, controlled
// shutdown), Restart, Pause (SIGSTOP) and Resume (SIGCONT) work on one node;
// Leader, TxnCoordinator and ActiveController say which node to fault.
type Cluster struct {
	nodes     []*Broker // nodes[i] has node.id i+1
	clusterID string
}

// DefaultClusterNodes is the node count when NewCluster is given 0.
const DefaultClusterNodes = 3

// clusterMember is what makes a Broker one node of a Cluster.
type clusterMember struct {
	id        int
	nodes     int
	voters    string // controller.quorum.voters
	clusterID string
}

// clusterHeap are the JVM heap flags of cluster nodes: three of them run
// at once on a 2-core, shared machine; a test cluster holds megabytes.
var clusterHeap = []string{"-Xms96m", "-Xmx384m"}

// apply turns single-node properties into this member's. Options'
// ExtraProperties are applied again afterwards, so a test can still
// override any of these.
func (m *clusterMember) apply(p map[string]string, o Options) {
	rf := strconv.Itoa(min(3, m.nodes))
	isr := strconv.Itoa(min(2, m.nodes))
	p["node.id"] = strconv.Itoa(m.id)
	p["controller.quorum.voters"] = m.voters
	for k, v := range map[string]string{
		"default.replication.factor":                       rf,
		"min.insync.replicas":                              isr,
		"offsets.topic.replication.factor":                 rf,
		"transaction.state.log.replication.factor":         rf,
		"transaction.state.log.min.isr":                    isr,
		"share.coordinator.state.topic.replication.factor": rf,
		"share.coordinator.state.topic.min.isr":            isr,
		// Kafka's defaults, as production has them: a SIGKILLed node's
		// partitions wait for the controller to fence it after 9 s
		// (issue 29 measured 10.8 s of delivery gap, Kafka's own).
		"broker.session.timeout.ms":    "9000",
		"broker.heartbeat.interval.ms": "2000",
		// Three JVMs on two cores: one replica fetcher is plenty.
		"num.replica.fetchers": "1",
	} {
		p[k] = v
	}
	maps.Copy(p, o.ExtraProperties)
}

// NewCluster starts a cluster of nodes nodes (0 means 3) with opts (Advertise
// and SASLSSL are not supported) and waits until every node is in the
// metadata or ctx ends (three minutes if it has no deadline). On error
// nothing is left running. Nodes get a 384 MiB heap unless opts.JVMArgs
// says otherwise.
func NewCluster(ctx context.Context, opts Options, nodes int) (*Cluster, error) {
	if nodes == 0 {
		nodes = DefaultClusterNodes
	}
	if nodes < 1 {
		return nil, fmt.Errorf("kafkatest: cluster of %d nodes, want at least 1", nodes)
	}
	if opts.Advertise != nil || opts.SASLSSL != nil {
		return nil, errors.New("kafkatest: a Cluster supports neither Options.Advertise nor Options.SASLSSL")
	}
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if !supported {
		return nil, fmt.Errorf("%w: brokers run only on Linux, where a JVM cannot outlive its test", ErrUnavailable)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
	}
	opts.JVMArgs = append(slices.Clone(clusterHeap), opts.JVMArgs...)
	java, err := findJava(opts)
	if err != nil {
		return nil, err
	}
	cache, err := cacheDir(opts)
	if err != nil {
		return nil, err
	}
	cp, err := resolveClasspath(ctx, opts, cache)
	if err != nil {
		return nil, err
	}
	ports, err := freePortList(2 * nodes)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: find free ports: %w", err)
	}
	clusterID, err := newClusterID()
	if err != nil {
		return nil, fmt.Errorf("kafkatest: cluster id: %w", err)
	}
	var voters []string
	for i := range nodes {
		voters = append(voters, strconv.Itoa(i+1)+"@127.0.0.1:"+strconv.Itoa(ports[2*i+1]))
	}
	c := &Cluster{clusterID: clusterID}
	for i := range nodes {
		root, err := makeRoot()
		if err != nil {
			c.Close()
			return nil, err
		}
		b := &Broker{
			opts: opts, java: java, cp: cp, dir: root,
			dataDir:        filepath.Join(root, "data"),
			propsPath:      filepath.Join(root, "server.properties"),
			log4jPath:      filepath.Join(root, "log4j2.properties"),
			logPath:        filepath.Join(root, "broker.log"),
			jvmLogPath:     filepath.Join(root, "jvm.log"),
			brokerPort:     ports[2*i],
			controllerPort: ports[2*i+1],
			member:         &clusterMember{id: i + 1, nodes: nodes, voters: strings.Join(voters, ","), clusterID: clusterID},
		}
		c.nodes = append(c.nodes, b)
		if !opts.DisableCDS {
			b.archive = cdsArchivePath(cache, java, cp)
		}
		if err := os.WriteFile(b.log4jPath, []byte(log4jConfig(b.logPath)), 0o644); err != nil {
			c.Close()
			return nil, fmt.Errorf("kafkatest: %w", err)
		}
		if err := b.format(ctx); err != nil {
			c.Close()
			return nil, err
		}
		if err := setMetaProperty(filepath.Join(b.dataDir, "meta.properties"), "cluster.id", clusterID); err != nil {
			c.Close()
			return nil, err
		}
	}
	// A node is ready once it registered with the controller quorum,
	// which needs a majority of the nodes running: start them together.
	errs := make([]error, nodes)
	var wg sync.WaitGroup
	for i, b := range c.nodes {
		wg.Go(func() {
			b.mu.Lock()
			defer b.mu.Unlock()
			errs[i] = b.startLocked(ctx, "start")
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	if err := c.WaitNodes(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// freePortList asks the kernel for n distinct free loopback ports.
func freePortList(n int) ([]int, error) {
	var ports []int
	for range n {
		l, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close() // held until all are chosen, so none repeats
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// setMetaProperty sets name=value in the meta.properties at path: every
// node of a cluster shares the cluster id.
func setMetaProperty(path, name, value string) error {
	meta, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `=.*$`)
	if !re.Match(meta) {
		return fmt.Errorf("kafkatest: %s has no %s:\n%s", path, name, meta)
	}
	meta = re.ReplaceAll(meta, []byte(name+"="+value))
	if err := os.WriteFile(path, meta, 0o644); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	return nil
}

// StartCluster starts a three-node cluster for one test (see NewCluster)
// and closes it in t.Cleanup, logging the end of every node's log first if
// the test failed. It skips (or, under WALBOX_REQUIRE_INTEGRATION=1, fails)
// like Start, and when KAFKA_BROKERS names an external cluster, whose nodes
// it cannot fault.
func StartCluster(t testing.TB, opts ...func(*Options)) *Cluster {
	t.Helper()
	if externalBroker() != nil {
		SkipExternal(t, "this test runs and faults a cluster of its own")
	}
	var o Options
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := NewCluster(ctx, o, 0)
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, b := range c.nodes {
				t.Logf("kafkatest: end of node %d's log (%s):\n%s", b.member.id, b.LogPath(), b.LogTail(30))
			}
		}
		if err := c.Close(); err != nil {
			t.Errorf("kafkatest: close cluster: %v", err)
		}
	})
	return c
}

// Addrs returns every node's broker listener, for kgo.SeedBrokers.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, b := range c.nodes {
		a = append(a, b.Addr())
	}
	return a
}

// Nodes returns the node count.
func (c *Cluster) Nodes() int { return len(c.nodes) }

// Node returns the node with node.id id (1 to Nodes()).
func (c *Cluster) Node(id int) *Broker {
	if id < 1 || id > len(c.nodes) {
		panic(fmt.Sprintf("kafkatest: node %d of a %d-node cluster", id, len(c.nodes)))
	}
	return c.nodes[id-1]
}

// NodeID returns b's node.id, 0 for a broker outside any cluster.
func (b *Broker) NodeID() int {
	if b.member == nil {
		return 0
	}
	return b.member.id
}

// Close kills every node and removes their directories. Not a graceful
// stop: nodes shutting down together lose the controller quorum, and a
// controlled shutdown then waits for a controller that is gone (a minute,
// measured, before the harness killed it anyway).
func (c *Cluster) Close() error {
	errs := make([]error, len(c.nodes))
	var wg sync.WaitGroup
	for i, b := range c.nodes {
		wg.Go(func() {
			if err := b.Kill(); err != nil && !errors.Is(err, ErrNotRunning) && !errors.Is(err, ErrClosed) {
				errs[i] = err
			}
			errs[i] = errors.Join(errs[i], b.Close())
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// admin returns a client of the nodes running now, with short timeouts so a
// frozen node does not hold a question up.
type clusterAdmin struct {
	*kadm.Client
	kgo *kgo.Client
}

func (c *Cluster) admin() (clusterAdmin, func(), error) {
	var seeds []string
	for _, b := range c.nodes {
		b.mu.Lock()
		if b.proc != nil {
			seeds = append(seeds, b.Addr())
		}
		b.mu.Unlock()
	}
	if len(seeds) == 0 {
		return clusterAdmin{}, nil, errors.New("kafkatest: no node of the cluster is running")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.DialTimeout(time.Second),
		kgo.RequestTimeoutOverhead(2*time.Second), kgo.RetryTimeout(5*time.Second),
		kgo.RetryBackoffFn(func(int) time.Duration { return 100 * time.Millisecond }))
	if err != nil {
		return clusterAdmin{}, nil, err
	}
	return clusterAdmin{kadm.NewClient(cl), cl}, cl.Close, nil
}

// retry calls f until it succeeds or ctx ends, then returns f's last error.
func retry(ctx context.Context, what string, f func(context.Context) error) error {
	for {
		actx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := f(actx)
		cancel()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkatest: %s: %w (last attempt: %v)", what, ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitNodes waits until the metadata lists every node as a broker.
func (c *Cluster) WaitNodes(ctx context.Context) error {
	return retry(ctx, "wait for every node in the metadata", func(ctx context.Context) error {
		adm, done, err := c.admin()
		if err != nil {
			return err
		}
		defer done()
		md, err := adm.BrokerMetadata(ctx)
		if err != nil {
			return err
		}
		if len(md.Brokers) != len(c.nodes) {
			return fmt.Errorf("metadata lists %d brokers, want %d", len(md.Brokers), len(c.nodes))
		}
		return nil
	})
}

// WaitInSync waits until every partition of every topic, the internal ones
// included, has a leader and all its replicas in sync: the cluster is fully
// replicated again, as an operator waits for between two restarts of a
// rolling restart.
func (c *Cluster) WaitInSync(ctx context.Context) error {
	return retry(ctx, "wait until every partition is fully replicated", func(ctx context.Context) error {
		adm, done, err := c.admin()
		if err != nil {
			return err
		}
		defer done()
		td, err := adm.ListTopicsWithInternal(ctx)
		if err != nil {
			return err
		}
		if err := td.Error(); err != nil {
			return err
		}
		for _, t := range td.Sorted() {
			for _, p := range t.Partitions.Sorted() {
				if p.Leader < 0 || len(p.ISR) != len(p.Replicas) {
					return fmt.Errorf("%s[%d]: leader %d, replicas %v, in sync %v", t.Topic, p.Partition, p.Leader, p.Replicas, p.ISR)
				}
			}
		}
		return nil
	})
}

// Leader returns the node id of the leader of topic's partition.
func (c *Cluster) Leader(ctx context.Context, topic string, partition int32) (int, error) {
	var id int
	err := retry(ctx, fmt.Sprintf("find the leader of %s[%d]", topic, partition), func(ctx context.Context) error {
		adm, done, err := c.admin()
		if err != nil {
			return err
		}
		defer done()
		td, err := adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		t, ok := td[topic]
		if !ok || t.Err != nil {
			return fmt.Errorf("topic %s: %v", topic, t.Err)
		}
		p, ok := t.Partitions[partition]
		if !ok || p.Leader < 0 {
			return fmt.Errorf("%s[%d] has no leader", topic, partition)
		}
		id = int(p.Leader)
		return nil
	})
	return id, err
}

// TxnCoordinator returns the node id of the transaction coordinator of
// transactional id txnID.
func (c *Cluster) TxnCoordinator(ctx context.Context, txnID string) (int, error) {
	var id int
	err := retry(ctx, "find the transaction coordinator of "+txnID, func(ctx context.Context) error {
		adm, done, err := c.admin()
		if err != nil {
			return err
		}
		defer done()
		r, ok := adm.FindTxnCoordinators(ctx, txnID)[txnID]
		if !ok {
			return errors.New("FindCoordinator: no answer for the transactional id")
		}
		if r.Err != nil {
			return r.Err
		}
		id = int(r.NodeID)
		return nil
	})
	return id, err
}

// ActiveController returns the node id of the KRaft quorum's leader, the
// active controller.
func (c *Cluster) ActiveController(ctx context.Context) (int, error) {
	var id int
	err := retry(ctx, "find the active controller", func(ctx context.Context) error {
		adm, done, err := c.admin()
		if err != nil {
			return err
		}
		defer done()
		cl := adm.kgo
		req := kmsg.NewPtrDescribeQuorumRequest()
		rt := kmsg.NewDescribeQuorumRequestTopic()
		rt.Topic = "__cluster_metadata"
		rp := kmsg.NewDescribeQuorumRequestTopicPartition()
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return err
		}
		if len(resp.Topics) != 1 || len(resp.Topics[0].Partitions) != 1 {
			return errors.New("DescribeQuorum: unexpected response shape")
		}
		p := resp.Topics[0].Partitions[0]
		if p.ErrorCode != 0 || p.LeaderID < 0 {
			return fmt.Errorf("DescribeQuorum: error code %d, leader %d", p.ErrorCode, p.LeaderID)
		}
		id = int(p.LeaderID)
		return nil
	})
	return id, err
}
