package pipeline

import (
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// During a rolling restart franz-go logs every failed dial of the broker
// being restarted ("unable to open connection to broker", a warning), and
// every produce request and metadata load that dial failed: issue 29
// counted 47 warnings in one rolling restart. brokerWatch replaces them with
// one warning when a broker becomes unreachable and one line when walbox
// connects to it again, with how long it was away and how many dials failed
// meanwhile; franz-go's own per-attempt lines go to debug
// (quietKafkaLogger). The walbox_kafka_brokers_unreachable and
// walbox_kafka_broker_outages_total metrics show the same; franz-go's
// walbox_kafka_connect_errors_total (kprom) still counts every failed dial
// per broker.

// perAttemptKafkaMessages are franz-go's messages logged once per failed
// connection attempt or per request that one failed; brokerWatch logs the
// outage instead.
var perAttemptKafkaMessages = map[string]bool{
	"unable to open connection to broker":                true,
	"produce request failed, triggering metadata update": true,
	"metadata update triggered":                          true,
}

// quietKafkaLogger logs franz-go's per-attempt messages at debug level.
type quietKafkaLogger struct{ kgo.Logger }

func (l quietKafkaLogger) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level < kgo.LogLevelDebug && level != kgo.LogLevelNone && perAttemptKafkaMessages[msg] {
		level = kgo.LogLevelDebug
	}
	l.Logger.Log(level, msg, keyvals...)
}

// brokerOutage is one broker walbox cannot connect to.
type brokerOutage struct {
	since  time.Time
	failed int
}

// brokerWatch is a franz-go hook following connections to each broker.
type brokerWatch struct {
	log *slog.Logger
	reg prometheus.Registerer

	mu      sync.Mutex
	down    map[int32]*brokerOutage
	outages int64
	// collectors are registered on reg, nil when registration failed
	// (another live client on the same registry has them).
	collectors []prometheus.Collector
}

var (
	_ kgo.HookBrokerConnect = (*brokerWatch)(nil)
	_ kgo.HookClientClosed  = (*brokerWatch)(nil)
)

// newBrokerWatch returns the hook, its metrics registered on reg (none when
// reg is nil).
func newBrokerWatch(log *slog.Logger, reg prometheus.Registerer) *brokerWatch {
	w := &brokerWatch{log: log.With("component", "kafka"), reg: reg, down: map[int32]*brokerOutage{}}
	if reg == nil {
		return w
	}
	cs := []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "walbox_kafka_brokers_unreachable",
			Help: "Kafka brokers walbox's last connection attempt to failed (a broker restarting or down).",
		}, func() float64 { w.mu.Lock(); defer w.mu.Unlock(); return float64(len(w.down)) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "walbox_kafka_broker_outages_total",
			Help: "Times a Kafka broker became unreachable: one per outage, however many connection attempts failed during it.",
		}, func() float64 { w.mu.Lock(); defer w.mu.Unlock(); return float64(w.outages) }),
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			w.log.Debug("kafka broker metrics not registered for this client", "err", err)
			return w
		}
	}
	w.collectors = cs
	return w
}

func (w *brokerWatch) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	addr := net.JoinHostPort(meta.Host, strconv.Itoa(int(meta.Port)))
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.down[meta.NodeID]
	switch {
	case err != nil && o == nil:
		w.down[meta.NodeID] = &brokerOutage{since: time.Now(), failed: 1}
		w.outages++
		w.log.Warn("kafka broker unreachable; retrying, and logging again when it is back (franz-go's per-attempt lines are at debug)",
			"broker", brokerName(meta.NodeID), "addr", addr, "err", err)
	case err != nil:
		o.failed++
	case o != nil:
		delete(w.down, meta.NodeID)
		w.log.Info("kafka broker reachable again", "broker", brokerName(meta.NodeID), "addr", addr,
			"unreachable_for", time.Since(o.since).Round(time.Millisecond).String(), "failed_attempts", o.failed)
	}
}

// brokerName names a broker as franz-go's log does: its node id, or "seed
// N" for the configured seed brokers (negative ids).
func brokerName(id int32) string {
	if id < 0 {
		return "seed " + strconv.Itoa(int(id-kgoSeedBase))
	}
	return strconv.Itoa(int(id))
}

// kgoSeedBase is the node id franz-go gives the first seed broker
// (math.MinInt32, the next seeds counting up).
const kgoSeedBase = -2147483648

func (w *brokerWatch) OnClientClosed(*kgo.Client) {
	for _, c := range w.collectors {
		w.reg.Unregister(c)
	}
}
