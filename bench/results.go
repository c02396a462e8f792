package bench

import (
	"cmp"
	"fmt"
	"slices"
	"time"
)

// Results is everything one benchmark run measured; it is written as
// results.json.
type Results struct {
	Started         time.Time `json:"started"`
	DurationSeconds float64   `json:"duration_seconds"`
	Quick           bool      `json:"quick"`
	Machine         Machine   `json:"machine"`
	Postgres        string    `json:"postgres"`
	Broker          string    `json:"broker"`
	Settings        Settings  `json:"settings"`

	Backlog  *BacklogResult  `json:"backlog,omitempty"`
	Steady   *SteadyResult   `json:"steady,omitempty"`
	LargeTxn *LargeTxnResult `json:"large_txn,omitempty"`
	Payload  *PayloadResult  `json:"large_payload,omitempty"`
	// ForeignUpdate and LargeLive run walbox while the work happens
	// (live.go).
	ForeignUpdate *ForeignUpdateResult `json:"foreign_update,omitempty"`
	LargeLive     []LiveTxnResult      `json:"large_live,omitempty"`

	// PeakRSS is the peak RSS of every walbox process run, the largest
	// first: walbox's memory target holds for each of them.
	PeakRSS []RSSFigure `json:"walbox_peak_rss"`

	// Comparisons are walbox's figures as ratios to the references.
	Comparisons []Comparison `json:"comparisons"`
	CPUProfile  string       `json:"cpu_profile,omitempty"`
	// SteadyCPUProfile profiles this process during walbox's steady run
	// (the writer and the consumer run in it too).
	SteadyCPUProfile string   `json:"steady_cpu_profile,omitempty"`
	LatencyPlot      string   `json:"latency_plot,omitempty"`
	Errors           []string `json:"errors,omitempty"`
	Notes            []string `json:"notes"`

	// Avro is what the Avro runs add (bench/avro.go; Config.Avro).
	Avro *AvroResult `json:"avro,omitempty"`

	// Debezium is walbox against Debezium from the same run
	// (--with-debezium).
	Debezium *DebeziumResult `json:"debezium,omitempty"`
}

// Machine describes where the run happened.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"go_version"`
	OS        string `json:"os"`
	// LoadAvgStart and LoadAvgEnd are /proc/loadavg's 1, 5 and 15 minute
	// averages before and after the run: the benchmark assumes an
	// otherwise idle machine.
	LoadAvgStart string `json:"loadavg_start"`
	LoadAvgEnd   string `json:"loadavg_end"`
}

// Settings echoes the configuration the figures belong to.
type Settings struct {
	BacklogEvents     int               `json:"backlog_events"`
	BacklogTxnSize    int               `json:"backlog_txn_size"`
	Aggregates        int               `json:"aggregates"`
	PayloadBytes      int               `json:"payload_bytes"`
	SteadyRate        int               `json:"steady_rate"`
	SteadySeconds     float64           `json:"steady_seconds"`
	SteadyTxnRows     [2]int            `json:"steady_txn_rows"`
	LargeTxnRows      []int             `json:"large_txn_rows"`
	ForeignRows       int               `json:"foreign_update_rows,omitempty"`
	LargeLiveRows     []int             `json:"large_live_rows,omitempty"`
	PollBatches       []int             `json:"poll_batches"`
	StatusIntervalMs  int64             `json:"status_interval_ms"`
	WalboxLingerMs    float64           `json:"walbox_producer_linger_ms"`
	PostgresOverrides map[string]string `json:"postgres_overrides"`
	// WalboxArgs and WalboxEnv are what every walbox run got beyond its
	// defaults (--walbox-args, --walbox-env); empty measures the defaults.
	WalboxArgs []string `json:"walbox_args,omitempty"`
	WalboxEnv  []string `json:"walbox_env,omitempty"`
	// EOSTxnIntervalMs is the exactly-once runs' --transaction-max-interval
	// (0: no exactly-once run).
	EOSTxnIntervalMs float64 `json:"eos_transaction_max_interval_ms,omitempty"`
}

// DBCost is what a relay cost the database during a run.
type DBCost struct {
	WALBytes             int64   `json:"wal_bytes"`
	WALBytesPerEvent     float64 `json:"wal_bytes_per_event"`
	TupleUpdates         int64   `json:"tuple_updates"`
	TupleUpdatesPerEvent float64 `json:"tuple_updates_per_event"`
	PGCPUSeconds         float64 `json:"pg_cpu_seconds"`
	PGCPUMsPer1kEvents   float64 `json:"pg_cpu_ms_per_1k_events"`
}

func dbCost(before, after dbSnap, events int) DBCost {
	c := DBCost{
		WALBytes:     int64(after.wal - before.wal),
		TupleUpdates: after.tupUpd - before.tupUpd,
		PGCPUSeconds: (after.pgCPU - before.pgCPU).Seconds(),
	}
	if events > 0 {
		c.WALBytesPerEvent = float64(c.WALBytes) / float64(events)
		c.TupleUpdatesPerEvent = float64(c.TupleUpdates) / float64(events)
		c.PGCPUMsPer1kEvents = c.PGCPUSeconds * 1000 * 1000 / float64(events)
	}
	return c
}

// minus returns c less the baseline's per-event costs, scaled to c's events.
func (c DBCost) minus(base DBCost, events int) DBCost {
	out := DBCost{
		WALBytesPerEvent:     c.WALBytesPerEvent - base.WALBytesPerEvent,
		TupleUpdatesPerEvent: c.TupleUpdatesPerEvent - base.TupleUpdatesPerEvent,
		PGCPUMsPer1kEvents:   c.PGCPUMsPer1kEvents - base.PGCPUMsPer1kEvents,
	}
	out.WALBytes = int64(out.WALBytesPerEvent * float64(events))
	out.TupleUpdates = int64(out.TupleUpdatesPerEvent * float64(events))
	out.PGCPUSeconds = out.PGCPUMsPer1kEvents * float64(events) / 1e6
	return out
}

// BacklogResult is the backlog-drain scenario.
type BacklogResult struct {
	Events       int        `json:"events"`
	Txns         int        `json:"txns"`
	TxnSize      int        `json:"txn_size"`
	PayloadBytes int64      `json:"payload_bytes"`
	LoadSeconds  []float64  `json:"load_seconds"`
	Runs         []DrainRun `json:"runs"`
	// Tracing compares the drains with tracing on to walbox's (Config.Tracing).
	Tracing *TracingCost `json:"tracing,omitempty"`
}

// DrainRun is one relay draining a backlog.
type DrainRun struct {
	Relay  string `json:"relay"`
	Events int    `json:"events"`
	// Delivered is Events unless the drain hit its time limit (Partial).
	Delivered int  `json:"delivered"`
	Partial   bool `json:"partial,omitempty"`
	// DrainSeconds runs from the relay's start to every event being done:
	// acknowledged by Kafka and, for walbox, the slot confirmed past the
	// last commit; for the poll relay, marked sent and committed.
	DrainSeconds float64 `json:"drain_seconds"`
	// AckedSeconds is when the last event was acknowledged by Kafka
	// (walbox: before the slot caught up; -1 when not observable).
	AckedSeconds float64 `json:"acked_seconds"`
	EventsPerSec float64 `json:"events_per_sec"`
	// MBPerSec counts the payloads as the writer wrote them, 10^6 bytes.
	MBPerSec float64 `json:"mb_per_sec"`
	DB       DBCost  `json:"db"`
	// CPUSeconds is the relay's CPU time during the drain: the walbox
	// process's own where it ran as one, else the benchmark process's
	// (the in-process relay plus the drain's polling, and the broker too
	// when it is kfake).
	CPUSeconds        float64 `json:"cpu_seconds"`
	CPUMicrosPerEvent float64 `json:"cpu_us_per_event"`
	// PeakRSSBytes is the walbox process's VmHWM, where it ran as one.
	PeakRSSBytes int64 `json:"peak_rss_bytes,omitempty"`
	// OtherCPUPct is the share of the machine's CPU that processes outside
	// the benchmark used during the run, in percent: a high one means the
	// figures are skewed by other work.
	OtherCPUPct float64 `json:"other_cpu_pct"`
	// RecordsPerBatch is the mean number of records per record batch the
	// relay's producer wrote, from reading back up to 100,000 of them.
	RecordsPerBatch float64 `json:"records_per_batch,omitempty"`
	// Inflight is walbox's in-flight window during the drain (in-process
	// walbox only).
	Inflight *InflightStats `json:"inflight,omitempty"`
	// SlotStats is the server's spill and stream figures for the relay's
	// slot during the drain (slot-based relays only).
	SlotStats *SlotStats `json:"slot_stats,omitempty"`
	Error     string     `json:"error,omitempty"`
}

// SteadyResult is the steady-load scenario.
type SteadyResult struct {
	TargetRate      int         `json:"target_rate"`
	DurationSeconds float64     `json:"duration_seconds"`
	Baseline        *SteadyRun  `json:"baseline,omitempty"`
	Runs            []SteadyRun `json:"runs"`
}

// SteadyRun is one relay under the steady load.
type SteadyRun struct {
	Relay          string       `json:"relay"`
	Events         int          `json:"events"`
	AchievedRate   float64      `json:"achieved_rate"`
	WriterMaxLagMs float64      `json:"writer_max_lag_ms"`
	Received       int          `json:"received"`
	Lost           int          `json:"lost"`
	Duplicates     int          `json:"duplicates"`
	Latency        LatencyStats `json:"latency"`
	// DB is the cost beyond the writer's own (the baseline run's per-event
	// figures subtracted); for the baseline itself, the writer's cost.
	DB DBCost `json:"db"`
	// RecordsPerBatch is as in DrainRun.
	RecordsPerBatch float64 `json:"records_per_batch,omitempty"`
	// P99PerSecondMs is the p99 latency of the events committed in each
	// second of the run: a spike that passes is a stall, a ramp is a relay
	// falling behind.
	P99PerSecondMs []float64 `json:"p99_per_second_ms,omitempty"`
	// OtherCPUPct is as in DrainRun, over the measured writing.
	OtherCPUPct float64 `json:"other_cpu_pct"`
	// PeakRSSBytes is as in DrainRun, read after the last event arrived.
	PeakRSSBytes int64 `json:"peak_rss_bytes,omitempty"`
	// SlotStats is as in DrainRun, over the measured writing.
	SlotStats *SlotStats `json:"slot_stats,omitempty"`
	Error     string     `json:"error,omitempty"`
	// CPUSeconds is the relay process's CPU time from the start of the
	// measured writing until the last event arrived (relays run as their
	// own process only).
	CPUSeconds float64 `json:"cpu_seconds,omitempty"`

	latencies []time.Duration
}

// LatencyStats summarises commit-return to consumer-receive latencies.
type LatencyStats struct {
	N      int     `json:"n"`
	P50Ms  float64 `json:"p50_ms"`
	P95Ms  float64 `json:"p95_ms"`
	P99Ms  float64 `json:"p99_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
	// Negative counts events received before the writer saw its commit
	// return (the consumer won the race); they count as 0 ms.
	Negative int `json:"negative"`
}

func latencyStats(l []time.Duration) LatencyStats {
	s := LatencyStats{N: len(l)}
	if len(l) == 0 {
		return s
	}
	var sum time.Duration
	for i, d := range l {
		if d < 0 {
			s.Negative++
			l[i] = 0
		}
		sum += l[i]
	}
	slices.Sort(l)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	q := func(p float64) float64 {
		i := int(p*float64(len(l))+0.5) - 1
		return ms(l[min(max(i, 0), len(l)-1)])
	}
	s.P50Ms, s.P95Ms, s.P99Ms = q(0.50), q(0.95), q(0.99)
	s.MaxMs = ms(l[len(l)-1])
	s.MeanMs = ms(sum) / float64(len(l))
	return s
}

// LargeTxnResult is the large-transaction scenario.
type LargeTxnResult struct {
	Runs []DrainRun `json:"runs"`
	// LoadSeconds[i] is the time to write the transaction of Runs' i-th size.
	LoadSeconds map[int]float64 `json:"load_seconds"`
}

// Comparison is one walbox figure against one reference.
type Comparison struct {
	Scenario  string  `json:"scenario"`
	Metric    string  `json:"metric"`
	Reference string  `json:"reference"`
	Walbox    float64 `json:"walbox"`
	Other     float64 `json:"reference_value"`
	// Ratio is walbox / reference.
	Ratio float64 `json:"ratio"`
	// Better says which direction of Ratio favours walbox.
	Better string `json:"better"`
}

// PayloadResult is the large-payload scenario.
type PayloadResult struct {
	Rows         int        `json:"rows"`
	TxnSize      int        `json:"txn_size"`
	PayloadBytes int        `json:"payload_bytes"`
	LoadSeconds  float64    `json:"load_seconds"`
	Runs         []DrainRun `json:"runs"`
}

// RSSFigure is the peak RSS of one walbox process run.
type RSSFigure struct {
	Run   string `json:"run"`
	Bytes int64  `json:"bytes"`
}

// peakRSSSummary lists the peak RSS of every walbox process run in res,
// the largest first.
func peakRSSSummary(res *Results) []RSSFigure {
	var out []RSSFigure
	add := func(relay, run string, b int64) {
		if b > 0 && !isReference(relay) {
			out = append(out, RSSFigure{Run: run, Bytes: b})
		}
	}
	if b := res.Backlog; b != nil {
		for _, r := range b.Runs {
			add(r.Relay, fmt.Sprintf("backlog drain, %s events%s", thousands(r.Events), relayNote(r.Relay)), r.PeakRSSBytes)
		}
	}
	if s := res.Steady; s != nil {
		for _, r := range s.Runs {
			add(r.Relay, fmt.Sprintf("steady load, %s events/s%s", thousands(steadyRate(s, r)), relayNote(r.Relay)), r.PeakRSSBytes)
		}
	}
	if l := res.LargeTxn; l != nil {
		for _, r := range l.Runs {
			add(r.Relay, fmt.Sprintf("large transaction, %s rows", thousands(r.Events)), r.PeakRSSBytes)
		}
	}
	if p := res.Payload; p != nil {
		for _, r := range p.Runs {
			add(r.Relay, fmt.Sprintf("large payloads, %s rows of %s bytes", thousands(r.Events), thousands(p.PayloadBytes)), r.PeakRSSBytes)
		}
	}
	if f := res.ForeignUpdate; f != nil {
		add(walboxName, fmt.Sprintf("foreign UPDATE of %s rows, events around it", thousands(f.Rows)), f.PeakRSSBytes)
	}
	for _, l := range res.LargeLive {
		add(walboxName, fmt.Sprintf("large transaction written live, %s rows", thousands(l.Rows)), l.PeakRSSBytes)
	}
	slices.SortStableFunc(out, func(a, b RSSFigure) int { return cmp.Compare(b.Bytes, a.Bytes) })
	return out
}
