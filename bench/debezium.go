package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/walbox/walbox/internal/debeziumtest"
)

// debeziumName is the relay name of Debezium in the tables.
const debeziumName = "debezium"

// debeziumSlot is the slot Debezium streams from in every scenario.
const debeziumSlot = "bench_debezium"

// debeziumWarmup is the warm-up before a steady run of Debezium: a JVM
// with the full JIT compiles its hot paths during the first seconds, which
// a long-running connector has behind it.
const debeziumWarmup = 10 * time.Second

// debeziumJVMArgs are the JVM flags of Connect as a user runs it:
// connect-standalone.sh's defaults (kafka-run-class.sh: G1 with a 20 ms
// pause goal, the full tiered JIT) with a 1 GiB heap instead of 2 GiB.
var debeziumJVMArgs = []string{
	"-Xms256m", "-Xmx1g",
	"-server", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
	"-XX:+ExplicitGCInvokesConcurrent", "-XX:MaxInlineLevel=15", "-Djava.awt.headless=true",
}

// DebeziumSettings is how Debezium was set up, printed with its figures.
type DebeziumSettings struct {
	// Tuning is the connector and worker properties set beyond what routes
	// the benchmark's outbox table (slot, publication, column names, topic).
	Tuning  map[string]string `json:"tuning"`
	JVMArgs []string          `json:"jvm_args"`
	Jars    string            `json:"jars"`
}

// debeziumTuning returns the properties a user tuning Debezium for
// throughput and latency would set, next to walbox's defaults
// (config.Defaults): the same producer linger (5 ms), batch limit and
// compression (franz-go's snappy), and Debezium's own knobs raised from
// their defaults (poll.interval.ms 500, max.batch.size 2048,
// max.queue.size 8192, offset.flush.interval.ms 60000).
func debeziumTuning() (connector, worker map[string]string) {
	connector = map[string]string{
		"poll.interval.ms":                   "10",
		"max.batch.size":                     "20480",
		"max.queue.size":                     "81920",
		"producer.override.linger.ms":        "5",
		"producer.override.batch.size":       strconv.Itoa(walboxBatchMaxSize),
		"producer.override.compression.type": "snappy",
		"producer.override.acks":             "all",
	}
	worker = map[string]string{
		"offset.flush.interval.ms":                "1000",
		"connector.client.config.override.policy": "All",
	}
	return connector, worker
}

// debeziumOptions returns the Connect set-up of one Debezium run: the
// benchmark's outbox (bigint id, aggregate_type, aggregate_id, payload)
// routed to <prefix>.<aggregate_type> keyed by aggregate_id, with the event
// id also in an event_id header, which the latency consumer joins on as it
// does for walbox; StringConverters, so the values are the payload bytes as
// walbox sends them; Debezium's slot created by the benchmark on the
// benchmark's publication.
func debeziumOptions(bootstrap string, pgPort int, slot, prefix, dir string) debeziumtest.Options {
	connector, worker := debeziumTuning()
	maps.Copy(connector, map[string]string{
		"slot.name":                                           slot,
		"publication.name":                                    Publication,
		"publication.autocreate.mode":                         "disabled",
		"table.include.list":                                  "public.outbox",
		"transforms.outbox.table.field.event.id":              "id",
		"transforms.outbox.table.field.event.key":             "aggregate_id",
		"transforms.outbox.table.field.event.payload":         "payload",
		"transforms.outbox.route.by.field":                    "aggregate_type",
		"transforms.outbox.route.topic.replacement":           prefix + ".${routedByValue}",
		"transforms.outbox.table.fields.additional.placement": "id:header:event_id",
	})
	return debeziumtest.Options{
		Name:      "bench-debezium",
		Bootstrap: bootstrap,
		PG:        debeziumtest.PG{Port: pgPort, DBName: "postgres"},
		Connector: connector,
		Worker:    worker,
		JVMArgs:   debeziumJVMArgs,
		Dir:       dir,
	}
}

// debeziumRelay is Debezium's Postgres connector with the Outbox Event
// Router in Kafka Connect standalone, its own JVM (internal/debeziumtest).
// It does not tell when it delivered an event, so Done sums the topics'
// high watermarks: records the broker acknowledged to all in-sync replicas
// (Connect's producer uses acks=all). Debezium confirms the slot only when
// it commits offsets (offset.flush.interval.ms), so a drain is complete
// when every event is acknowledged; the slot is not waited for.
type debeziumRelay struct {
	env    *Env
	slot   string
	prefix string
	dir    string // Connect's properties, offsets and logs

	c       *debeziumtest.Connect
	readyAt time.Time
	cpu0    time.Duration

	acked  atomic.Int64
	failed atomic.Pointer[error]
	stop   context.CancelFunc
	wg     sync.WaitGroup
}

var _ slotRelay = (*debeziumRelay)(nil)

// NewDebezium returns Debezium streaming slot into topics
// prefix.<aggregate_type>, keeping Connect's files in dir.
func (e *Env) NewDebezium(slot, prefix, dir string) *debeziumRelay {
	return &debeziumRelay{env: e, slot: slot, prefix: prefix, dir: dir}
}

func (d *debeziumRelay) Name() string       { return debeziumName }
func (d *debeziumRelay) Slot() string       { return d.slot }
func (d *debeziumRelay) ConfirmsSlot() bool { return false }
func (d *debeziumRelay) Done() int64        { return d.acked.Load() }
func (d *debeziumRelay) Topics() []string {
	return []string{d.prefix + ".order", d.prefix + ".customer"}
}

func (d *debeziumRelay) Err() error {
	if p := d.failed.Load(); p != nil {
		return *p
	}
	return nil
}

// ReadyAt is when the connector's task was RUNNING and its slot streaming.
func (d *debeziumRelay) ReadyAt() time.Time { return d.readyAt }

// Warmup is debeziumWarmup.
func (d *debeziumRelay) Warmup() time.Duration { return debeziumWarmup }

// Start creates the slot if it is missing (the backlog scenario created it
// before writing), starts Connect and waits until the task runs, then
// watches the topics' high watermarks and the connector's health.
func (d *debeziumRelay) Start(ctx context.Context) error {
	if d.env.kafka == nil {
		return errors.New("debezium: Kafka Connect needs a real broker (--broker kafka), not " + d.env.BrokerKind)
	}
	if _, err := d.env.CreateSlot(ctx, d.slot); err != nil {
		return err
	}
	// An offsets file of an earlier benchmark (another server, other
	// LSNs) would make Debezium skip or refuse this run's events.
	if err := os.RemoveAll(d.dir); err != nil {
		return fmt.Errorf("debezium: %w", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	c, err := debeziumtest.Start(sctx, debeziumOptions(d.env.Brokers[0], d.env.PG.Port(), d.slot, d.prefix, d.dir))
	if err != nil {
		return fmt.Errorf("debezium: %w", err)
	}
	readyAt := time.Now()
	cpu0, err := processCPU(c.PID())
	if err != nil {
		_ = c.Close()
		return fmt.Errorf("debezium: %w", err)
	}
	d.c, d.readyAt, d.cpu0 = c, readyAt, cpu0
	wctx, stop := context.WithCancel(context.Background())
	d.stop = stop
	d.wg.Add(1)
	go d.watch(wctx)
	return nil
}

// watchInterval is how often watch reads the high watermarks; the
// connector's health is checked every checkEvery reads.
const (
	watchInterval = 20 * time.Millisecond
	checkEvery    = 50
)

// watch keeps acked at the sum of the topics' high watermarks and records
// a failed connector, until ctx ends.
func (d *debeziumRelay) watch(ctx context.Context) {
	defer d.wg.Done()
	tick := time.NewTicker(watchInterval)
	defer tick.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if offs, err := d.env.adm.ListEndOffsets(ctx, d.Topics()...); err == nil {
			var sum int64
			ok := true
			offs.Each(func(o kadm.ListedOffset) {
				sum += o.Offset
				ok = ok && o.Err == nil
			})
			if ok {
				d.acked.Store(sum)
			}
		}
		if i%checkEvery == 0 {
			if err := d.c.Check(ctx); err != nil && ctx.Err() == nil {
				d.failed.CompareAndSwap(nil, &err)
			}
		}
	}
}

// PeakRSS is the Connect JVM's VmHWM.
func (d *debeziumRelay) PeakRSS() (int64, error) {
	if d.c == nil || d.c.PID() == 0 {
		return 0, errors.New("debezium is not running")
	}
	return peakRSS(d.c.PID())
}

// CPU is the Connect JVM's CPU time since its task was RUNNING: the JVM's
// start-up (class loading, Connect's plugin scan) is not counted.
func (d *debeziumRelay) CPU() (time.Duration, error) {
	if d.c == nil || d.c.PID() == 0 {
		return 0, errors.New("debezium is not running")
	}
	cpu, err := processCPU(d.c.PID())
	return cpu - d.cpu0, err
}

// Stop stops Connect gracefully (it flushes its offsets and confirms the
// slot) and keeps its files in dir.
func (d *debeziumRelay) Stop() error {
	if d.c == nil {
		return nil
	}
	d.stop()
	d.wg.Wait()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := d.c.Stop(ctx)
	err = errors.Join(err, d.c.Close())
	d.c = nil
	if err != nil {
		return fmt.Errorf("debezium: %w (Connect's log: %s)", err, filepath.Join(d.dir, "connect.log"))
	}
	return nil
}

// newDebezium returns the Debezium relay of one scenario run, its files in
// <out>/debezium-<scenario>.
func (r *Runner) newDebezium(scenario string) *debeziumRelay {
	return r.env.NewDebezium(debeziumSlot, r.prefix(scenario, debeziumName), filepath.Join(r.cfg.OutDir, "debezium-"+scenario))
}
