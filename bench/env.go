package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/pgtest"
)

// Broker kinds for EnvOptions.Broker.
const (
	BrokerAuto  = "auto"  // kafkatest when java (and mvn, or a cached classpath) are there, else kfake
	BrokerKafka = "kafka" // kafkatest, failing if it cannot start
	BrokerKfake = "kfake" // franz-go's in-process fake, in this process
)

// partitionsPerTopic is the partition count of every topic the benchmark
// creates. walbox routes to two topics (one per aggregate type), the ceiling
// to one topic with twice as many partitions, so every relay writes to six.
const partitionsPerTopic = 3

// pgSettings tune the throwaway server for measuring, on top of pgtest's
// defaults (wal_level=logical, fsync=off, full_page_writes=off):
//   - synchronous_commit=on as in production: a commit returns once its WAL
//     is flushed, and the walsender only sends flushed WAL, so with it off
//     walbox's latency would include the WAL writer's 200 ms cycle;
//   - no checkpoint inside a run (max_wal_size, checkpoint_timeout), so WAL
//     volume measures the relays, not checkpoint timing;
//   - autovacuum off, so WAL and CPU during a drain are the relay's own. This
//     flatters the polling relay: the dead tuples its updates leave are never
//     vacuumed, a cost production pays on top of what is measured here.
var pgSettings = map[string]string{
	"synchronous_commit":        "on",
	"max_wal_size":              "16GB",
	"min_wal_size":              "1GB",
	"checkpoint_timeout":        "1h",
	"autovacuum":                "off",
	"shared_buffers":            "1GB",
	"max_connections":           "100",
	"wal_sender_timeout":        "60s",
	"logical_decoding_work_mem": "64MB",
}

// EnvOptions configures StartEnv.
type EnvOptions struct {
	Broker string // BrokerAuto, BrokerKafka or BrokerKfake; empty means auto
	Log    *slog.Logger
}

// Env is the Postgres server and the broker every scenario runs against.
type Env struct {
	PG         *pgtest.Server
	Brokers    []string
	BrokerKind string // "kafka <version> (internal/kafkatest)" or "kfake (in-process)"
	// PGVersion is the server's version string.
	PGVersion string
	// WalboxArgs are extra arguments of every walbox process run, and
	// WalboxEnv extra KEY=VALUE environment entries (WALBOX_*, GOMEMLIMIT
	// and GOGC are not passed on from the benchmark's environment), to
	// measure settings other than the defaults.
	WalboxArgs, WalboxEnv []string

	log     *slog.Logger
	kafka   *kafkatest.Broker
	kfake   *kfake.Cluster
	adminCl *kgo.Client
	adm     *kadm.Client
}

// StartEnv starts Postgres and the broker.
func StartEnv(ctx context.Context, o EnvOptions) (*Env, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	e := &Env{log: o.Log}
	pg, err := pgtest.StartServer(ctx, pgtest.Options{Settings: pgSettings})
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	e.PG = pg
	if err := e.startBroker(ctx, o.Broker); err != nil {
		e.Close()
		return nil, err
	}
	if err := e.warmBroker(ctx); err != nil {
		e.Close()
		return nil, err
	}
	conn, err := e.Connect(ctx)
	if err != nil {
		e.Close()
		return nil, err
	}
	defer conn.Close(context.Background())
	if err := conn.QueryRow(ctx, "SELECT version()").Scan(&e.PGVersion); err != nil {
		e.Close()
		return nil, err
	}
	if i := strings.Index(e.PGVersion, " on "); i > 0 {
		e.PGVersion = e.PGVersion[:i]
	}
	return e, nil
}

func (e *Env) startBroker(ctx context.Context, kind string) error {
	switch kind {
	case "", BrokerAuto, BrokerKafka:
		bctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
		defer cancel()
		b, err := kafkatest.StartBroker(bctx, kafkatest.Options{Partitions: partitionsPerTopic})
		if err == nil {
			e.kafka = b
			e.Brokers = b.Addrs()
			e.BrokerKind = "kafka " + b.Version() + " (internal/kafkatest, own JVM)"
			break
		}
		if kind == BrokerKafka || !errors.Is(err, kafkatest.ErrUnavailable) {
			return fmt.Errorf("start kafka broker: %w", err)
		}
		e.log.Warn("no real Kafka broker on this machine, falling back to kfake", "err", err)
		fallthrough
	case BrokerKfake:
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(),
			kfake.DefaultNumPartitions(partitionsPerTopic))
		if err != nil {
			return fmt.Errorf("start kfake: %w", err)
		}
		e.kfake = c
		e.Brokers = c.ListenAddrs()
		e.BrokerKind = "kfake (in-process, shares the benchmark's CPU)"
	default:
		return fmt.Errorf("unknown broker %q (want auto, kafka or kfake)", kind)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...))
	if err != nil {
		return err
	}
	e.adminCl = cl
	e.adm = kadm.NewClient(cl)
	return nil
}

// Close stops the broker and Postgres, removing their data.
func (e *Env) Close() {
	if e.adminCl != nil {
		e.adminCl.Close()
	}
	if e.kafka != nil {
		if err := e.kafka.Close(); err != nil {
			e.log.Warn("close kafka broker", "err", err)
		}
	}
	if e.kfake != nil {
		e.kfake.Close()
	}
	if e.PG != nil {
		if err := e.PG.Close(); err != nil {
			e.log.Warn("close postgres", "err", err)
		}
	}
}

// DSN is the connection string of the benchmark database.
func (e *Env) DSN() string { return e.PG.DSN("postgres") }

// Connect opens an ordinary session.
func (e *Env) Connect(ctx context.Context) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, e.DSN())
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}

// CreateTopics creates topics with n partitions each, replication factor 1.
func (e *Env) CreateTopics(ctx context.Context, n int32, topics ...string) error {
	resp, err := e.adm.CreateTopics(ctx, n, 1, nil, topics...)
	if err != nil {
		return fmt.Errorf("create topics %v: %w", topics, err)
	}
	for _, t := range resp.Sorted() {
		if t.Err != nil {
			return fmt.Errorf("create topic %s: %w", t.Topic, t.Err)
		}
	}
	// A fresh topic's partitions may not have leaders for a moment; wait
	// until metadata lists one for each, so the first produce does not
	// retry and the first events' latency measures the relay.
	deadline := time.Now().Add(30 * time.Second)
	for {
		md, err := e.adm.Metadata(ctx, topics...)
		ready := err == nil
		if ready {
			for _, t := range topics {
				td, ok := md.Topics[t]
				if !ok || td.Err != nil || len(td.Partitions) != int(n) {
					ready = false
					break
				}
				for _, p := range td.Partitions {
					if p.Leader < 0 || p.Err != nil {
						ready = false
					}
				}
			}
		}
		if ready {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("topics %v have no leaders after 30s (last error: %v)", topics, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// pgCPU returns the CPU time used so far by the Postgres server: the
// postmaster, the children it has reaped (cutime/cstime) and those alive.
// A backend that exits is counted through its parent's cutime once reaped.
func (e *Env) pgCPU() (time.Duration, error) {
	pid := e.postmasterPID()
	if pid <= 0 {
		return 0, errors.New("no postmaster.pid")
	}
	return treeCPU(pid)
}

// postmasterPID returns the server's process id, 0 if unknown.
func (e *Env) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(e.PG.DataDir(), "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// warmRecords is how many records warmBroker produces.
const warmRecords = 50_000

// warmBroker produces a burst of records to a topic of its own, so the
// broker's JIT has compiled its produce path before the first relay is
// measured, rather than during it.
func (e *Env) warmBroker(ctx context.Context) error {
	const topic = "bench-warmup"
	if err := e.CreateTopics(ctx, partitionsPerTopic, topic); err != nil {
		return err
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers...), kgo.RequiredAcks(kgo.AllISRAcks()))
	if err != nil {
		return err
	}
	defer cl.Close()
	value := make([]byte, payloadSize)
	for i := range value {
		value[i] = 'x'
	}
	errs := make(chan error, 1)
	for i := range warmRecords {
		cl.Produce(ctx, &kgo.Record{Topic: topic, Key: strconv.AppendInt(nil, int64(i%1000), 10), Value: value},
			func(_ *kgo.Record, err error) {
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			})
	}
	if err := cl.Flush(ctx); err != nil {
		return fmt.Errorf("warm up the broker: %w", err)
	}
	select {
	case err := <-errs:
		return fmt.Errorf("warm up the broker: %w", err)
	default:
		return nil
	}
}
