package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/jackc/pglogrepl"
)

// Config is what cmd/walbox-bench asks for.
type Config struct {
	Quick bool

	// Backlog: Events rows in transactions of TxnSize, over Aggregates
	// aggregates, written by LoadConns connections in parallel.
	Events     int
	TxnSize    int
	Aggregates int
	LoadConns  int

	// Steady load.
	Rate          int
	Duration      time.Duration
	WriterConns   int
	SteadyCeiling bool // also run the ceiling under the steady load

	// LargeTxn lists the sizes of the large-transaction scenario.
	LargeTxn []int

	// ForeignRows is the row count of the foreign-update scenario's table
	// (outside the publication), updated in one transaction.
	ForeignRows int
	// LargeLive lists the sizes of the large-live scenario: one outbox
	// transaction written while walbox streams.
	LargeLive []int

	// PollBatches are the polling relay's batch sizes.
	PollBatches []int

	// Scenarios to run: "backlog", "steady", "large", "payload",
	// "foreign-update", "large-live"; empty means all.
	Scenarios []string

	// LargePayloadRows is the row count of the large-payload scenario,
	// written in transactions of LargePayloadTxn rows with payloads of
	// LargePayloadBytes.
	LargePayloadRows  int
	LargePayloadTxn   int
	LargePayloadBytes int

	OutDir string
	// CPUProfile is the file for a CPU profile of walbox during the backlog
	// drain; it adds a run of walbox in this process (walboxRelay) to the
	// backlog and steady scenarios, since the process runs cannot be profiled.
	CPUProfile string
	WalboxBin  string // prebuilt walbox binary; empty builds ./cmd/walbox
	// WalboxLinger is walbox's --producer-linger.
	WalboxLinger time.Duration
	// PollDrainLimit, if positive, stops a polling relay's backlog drain
	// after that long; its rate then counts what it delivered.
	PollDrainLimit time.Duration
	// DrainTimeout bounds one drain or one steady run's tail.
	DrainTimeout time.Duration

	// ExactlyOnce adds walbox with --delivery exactly-once (relay
	// "walbox-eos") to the backlog and steady scenarios, with Kafka
	// transactions of at most EOSTxnInterval (bench/delivery.go).
	ExactlyOnce    bool
	EOSTxnInterval time.Duration

	// Avro adds walbox with --value-format avro (relay "walbox-avro")
	// against a registry served from this process to the backlog drain,
	// and a steady run of it at 2,000 events/s (bench/avro.go).
	Avro bool
	// Tracing adds two backlog drains of walbox with OpenTelemetry tracing
	// on (bench/tracing.go), exporting to an OTLP sink in this process:
	// 1 % and 100 % of the rows sampled.
	Tracing bool

	Log      *slog.Logger // diagnostics; relay logs at warn and above
	Progress io.Writer    // one line per step

	// WithDebezium adds Debezium's Postgres connector with the Outbox Event
	// Router in Kafka Connect standalone (debezium.go) to the backlog and
	// steady scenarios; it needs java, mvn and a real broker.
	WithDebezium bool
}

func (c Config) wants(s string) bool {
	if len(c.Scenarios) == 0 {
		return true
	}
	for _, x := range c.Scenarios {
		if x == s {
			return true
		}
	}
	return false
}

// Runner runs the scenarios one after another on one Env.
type Runner struct {
	cfg    Config
	env    *Env
	res    *Results
	nextID int64
	run    int    // run counter, for unique topic names
	bin    string // the walbox binary
	// registry serves the Avro runs' schemas (Config.Avro).
	registry *benchRegistry
}

// NewRunner returns a runner for cfg on env.
func NewRunner(cfg Config, env *Env) *Runner {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.DrainTimeout <= 0 {
		cfg.DrainTimeout = 15 * time.Minute
	}
	return &Runner{cfg: cfg, env: env, nextID: 1}
}

func (r *Runner) progress(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "%s  "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
}

func (r *Runner) fail(scenario string, err error) {
	msg := scenario + ": " + err.Error()
	r.res.Errors = append(r.res.Errors, msg)
	r.progress("ERROR %s", msg)
}

// ids reserves n event ids.
func (r *Runner) ids(n int) int64 {
	id := r.nextID
	r.nextID += int64(n)
	return id
}

// prefix returns a fresh topic prefix for a run.
func (r *Runner) prefix(scenario, relay string) string {
	r.run++
	return fmt.Sprintf("bench%02d-%s-%s", r.run, scenario, relay)
}

// Run runs the configured scenarios and returns what they measured; a
// failing relay is recorded in Results.Errors and the rest still run.
func (r *Runner) Run(ctx context.Context) (*Results, error) {
	c := r.cfg
	r.res = &Results{
		Started:  time.Now(),
		Quick:    c.Quick,
		Machine:  Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), OS: runtime.GOOS + "/" + runtime.GOARCH, LoadAvgStart: loadAvg()},
		Postgres: r.env.PGVersion,
		Broker:   r.env.BrokerKind,
		Settings: Settings{
			BacklogEvents: c.Events, BacklogTxnSize: c.TxnSize, Aggregates: c.Aggregates,
			PayloadBytes: payloadSize, SteadyRate: c.Rate, SteadySeconds: c.Duration.Seconds(),
			SteadyTxnRows: [2]int{1, 10}, LargeTxnRows: c.LargeTxn, PollBatches: c.PollBatches,
			ForeignRows: c.ForeignRows, LargeLiveRows: c.LargeLive,
			StatusIntervalMs: statusInterval.Milliseconds(), PostgresOverrides: pgSettings,
			WalboxLingerMs: float64(c.WalboxLinger) / float64(time.Millisecond),
			WalboxArgs:     r.env.WalboxArgs, WalboxEnv: r.env.WalboxEnv,
		},
	}
	if err := r.env.PrepareSchema(ctx); err != nil {
		return nil, err
	}
	// Every scenario runs walbox as its own process, for its peak RSS.
	// Build it first, so a build failure shows at once.
	bin := c.WalboxBin
	if bin == "" {
		dir, err := os.MkdirTemp("", "walbox-bench-bin-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
		r.progress("building ./cmd/walbox")
		if bin, err = BuildWalbox(ctx, dir); err != nil {
			return nil, err
		}
	}
	r.bin = bin
	if c.Avro {
		r.registry = startRegistry()
		defer r.registry.Close()
		r.res.Avro = &AvroResult{DistinctSchemas: 2}
	}
	if c.wants("backlog") {
		r.backlog(ctx)
	}
	if c.wants("steady") && ctx.Err() == nil {
		r.steady(ctx)
	}
	if c.wants("large") && ctx.Err() == nil {
		r.largeTxn(ctx, bin)
	}
	if c.wants("payload") && ctx.Err() == nil {
		r.largePayload(ctx)
	}
	if c.wants("foreign-update") && c.ForeignRows > 0 && ctx.Err() == nil {
		r.foreignUpdate(ctx)
	}
	if c.wants("large-live") && ctx.Err() == nil {
		r.largeLive(ctx)
	}
	r.res.PeakRSS = peakRSSSummary(r.res)
	if c.ExactlyOnce {
		r.res.Settings.EOSTxnIntervalMs = float64(c.EOSTxnInterval) / float64(time.Millisecond)
	}
	r.res.Comparisons = append(compare(r.res), compareDelivery(r.res)...)
	r.res.Notes = append(append(notes(r.res), deliveryNotes(r.res)...), avroNotes(r.res)...)
	r.res.Debezium = r.debeziumSummary()
	r.res.DurationSeconds = time.Since(r.res.Started).Seconds()
	r.res.Machine.LoadAvgEnd = loadAvg()
	return r.res, ctx.Err()
}

// drain starts rel, waits until n events are done (and, for a relay that
// confirms its slot, the slot is at or past target), stops it, and reports.
// onStart and onDone bracket the timed part (the CPU profile).
//
// A positive limit ends the drain early: the run is then marked Partial and
// its rates count the events delivered until then.
func (r *Runner) drain(ctx context.Context, rel Relay, n int, target pglogrepl.LSN, payload int64, limit time.Duration,
	onStart func() error, onDone func(),
) DrainRun {
	run := DrainRun{Relay: rel.Name(), Events: n, AckedSeconds: -1}
	if err := r.env.CreateTopics(ctx, topicPartitions(rel), rel.Topics()...); err != nil {
		run.Error = err.Error()
		return run
	}
	before, err := r.env.snapshot(ctx)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	if onStart != nil {
		if err := onStart(); err != nil {
			run.Error = err.Error()
			return run
		}
	}
	sr, _ := rel.(slotRelay)
	if sr != nil {
		if err := r.resetSlotStats(ctx, sr.Slot()); err != nil {
			run.Error = err.Error()
			return run
		}
	}
	t0, cpu0, watch := time.Now(), selfCPU(), r.env.startCPUWatch()
	if err := rel.Start(ctx); err != nil {
		if onDone != nil {
			onDone()
		}
		run.Error = err.Error()
		return run
	}
	if rr, ok := rel.(readyRelay); ok {
		t0 = rr.ReadyAt() // a JVM's start-up is not the drain
	}
	acked, done, err := r.waitDrain(ctx, rel, n, target, t0, limit)
	delivered := n
	if errors.Is(err, errLimit) {
		run.Partial, err = true, nil
		delivered = int(rel.Done())
		done = time.Since(t0)
	}
	run.Delivered = delivered
	if onDone != nil {
		onDone()
	}
	run.OtherCPUPct = watch.otherPct()
	if _, ok := rel.(procRelay); !ok {
		// In-process relays: this process's CPU, which is the relay's plus
		// the small cost of waitDrain (and the broker's with kfake).
		run.CPUSeconds = (selfCPU() - cpu0).Seconds()
	}
	if pr, ok := rel.(procRelay); ok && err == nil {
		if rss, e := pr.PeakRSS(); e == nil {
			run.PeakRSSBytes = rss
		} else {
			err = e
		}
		if cpu, e := pr.CPU(); e == nil {
			run.CPUSeconds = cpu.Seconds()
		}
	}
	stopErr := rel.Stop()
	if w, ok := rel.(*walboxRelay); ok {
		run.Inflight = w.inflightStats()
	}
	run.RecordsPerBatch = r.env.sampleBatches(ctx, rel.Topics(), delivered)
	flushStats()
	after, serr := r.env.snapshot(ctx)
	if sr != nil {
		st, e := r.env.SlotStats(ctx, sr.Slot())
		run.SlotStats, serr = &st, errors.Join(serr, e)
	}
	if err = errors.Join(err, stopErr, serr); err != nil {
		run.Error = err.Error()
	}
	if acked > 0 {
		run.AckedSeconds = acked.Seconds()
	}
	run.DrainSeconds = done.Seconds()
	if done > 0 {
		run.EventsPerSec = float64(delivered) / done.Seconds()
		run.MBPerSec = float64(payload) * float64(delivered) / float64(n) / 1e6 / done.Seconds()
	}
	run.DB = dbCost(before, after, delivered)
	if delivered > 0 {
		run.CPUMicrosPerEvent = run.CPUSeconds * 1e6 / float64(delivered)
	}
	return run
}

// resetSlotStats zeroes the server's decoding statistics of slot if it
// exists (a relay that creates its own slot starts from zero anyway).
func (r *Runner) resetSlotStats(ctx context.Context, slot string) error {
	ok, err := r.env.slotExists(ctx, slot)
	if err != nil || !ok {
		return err
	}
	return r.env.ResetSlotStats(ctx, slot)
}

// errLimit ends a drain that reached its time limit.
var errLimit = errors.New("drain time limit reached")

// waitDrain polls rel and the slot until the drain is complete, or until
// limit (if positive) has passed, which returns errLimit.
func (r *Runner) waitDrain(ctx context.Context, rel Relay, n int, target pglogrepl.LSN, t0 time.Time, limit time.Duration) (acked, done time.Duration, err error) {
	conn, err := r.env.Connect(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer conn.Close(context.Background())
	sr, _ := rel.(slotRelay)
	needSlot := sr != nil && sr.ConfirmsSlot()
	deadline := t0.Add(r.cfg.DrainTimeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	var lastSlotCheck time.Time
	for {
		select {
		case <-ctx.Done():
			return acked, 0, ctx.Err()
		case <-tick.C:
		}
		now := time.Now()
		if err := rel.Err(); err != nil {
			return acked, 0, err
		}
		if d := rel.Done(); acked == 0 && d >= int64(n) {
			acked = now.Sub(t0)
		}
		ackedAll := acked > 0 || rel.Done() < 0
		if ackedAll && !needSlot {
			return acked, acked, nil
		}
		// The slot is read every 50 ms: each read is a query the database
		// pays for, counted in the relay's Postgres CPU.
		if ackedAll && now.Sub(lastSlotCheck) >= 50*time.Millisecond {
			lastSlotCheck = now
			lsn, err := slotConfirmed(ctx, conn, sr.Slot())
			if err != nil {
				return acked, 0, err
			}
			if lsn >= target {
				return acked, time.Since(t0), nil
			}
		}
		if limit > 0 && now.Sub(t0) >= limit {
			return acked, 0, errLimit
		}
		if now.After(deadline) {
			return acked, 0, fmt.Errorf("%s: not drained after %s (%d of %d events done)", rel.Name(), r.cfg.DrainTimeout, rel.Done(), n)
		}
	}
}

func topicPartitions(rel Relay) int32 {
	if len(rel.Topics()) == 1 {
		return 2 * partitionsPerTopic
	}
	return partitionsPerTopic
}

// backlog runs the backlog-drain scenario: one backlog, written while no
// relay runs, drained by walbox and by the ceiling from two slots created
// before it, then by the polling relays (each on a freshly written copy,
// since a poll relay consumes the table).
func (r *Runner) backlog(ctx context.Context) {
	c := r.cfg
	txns := c.Events / c.TxnSize
	n := txns * c.TxnSize
	res := &BacklogResult{Events: n, Txns: txns, TxnSize: c.TxnSize}
	r.res.Backlog = res
	load := func() (pglogrepl.LSN, bool) {
		r.progress("backlog: writing %d events in %d transactions of %d (%d connections)", n, txns, c.TxnSize, c.LoadConns)
		lr, err := r.env.Load(ctx, r.ids(n), txns, c.TxnSize, c.LoadConns, c.Aggregates)
		if err != nil {
			r.fail("backlog load", err)
			return 0, false
		}
		res.PayloadBytes = lr.PayloadBytes
		res.LoadSeconds = append(res.LoadSeconds, lr.Duration.Seconds())
		r.progress("backlog: written in %.1fs (%.0f events/s)", lr.Duration.Seconds(), float64(n)/lr.Duration.Seconds())
		target, err := r.env.currentLSN(ctx)
		if err != nil {
			r.fail("backlog load", err)
			return 0, false
		}
		return target, true
	}
	record := func(run DrainRun) {
		res.Runs = append(res.Runs, run)
		if run.Error != "" {
			r.fail("backlog "+run.Relay, errors.New(run.Error))
			return
		}
		if run.Partial {
			r.progress("backlog: %-10s stopped after %6.2fs with %d of %d events delivered: %8.0f events/s, %6.1f MB/s",
				run.Relay, run.DrainSeconds, run.Delivered, run.Events, run.EventsPerSec, run.MBPerSec)
			return
		}
		extra := ""
		if run.Inflight != nil {
			extra = fmt.Sprintf(" (in flight: mean %.0f of %d, at the limit %.0f%% of the time)", run.Inflight.Mean, run.Inflight.Limit, run.Inflight.AtLimitPct)
		}
		r.progress("backlog: %-10s drained in %6.2fs: %8.0f events/s, %6.1f MB/s%s%s (other processes: %.0f%% CPU)",
			run.Relay, run.DrainSeconds, run.EventsPerSec, run.MBPerSec, rssNote(run.PeakRSSBytes), extra, run.OtherCPUPct)
	}

	if err := r.env.ResetOutbox(ctx); err != nil {
		r.fail("backlog", err)
		return
	}
	slots := []string{"bench_walbox", "bench_ceiling"}
	if c.CPUProfile != "" {
		slots = append(slots, "bench_walbox_inproc")
	}
	if c.WithDebezium {
		slots = append(slots, debeziumSlot)
	}
	if c.ExactlyOnce {
		slots = append(slots, "bench_walbox_eos")
	}
	if c.Avro {
		slots = append(slots, "bench_walbox_avro")
	}
	if c.Tracing {
		slots = append(slots, tracingSlots...)
	}
	for _, slot := range slots {
		if _, err := r.env.CreateSlot(ctx, slot); err != nil {
			r.fail("backlog", err)
			return
		}
	}
	target, ok := load()
	if !ok {
		return
	}

	logPath := filepath.Join(c.OutDir, "walbox-backlog.log")
	record(r.drain(ctx, r.env.NewWalboxProcess(r.bin, "bench_walbox", r.prefix("backlog", "walbox"), c.WalboxLinger, logPath), n, target, res.PayloadBytes, 0, nil, nil))
	if c.Tracing {
		r.tracingDrains(ctx, res, n, target, record)
	}
	if c.ExactlyOnce {
		record(r.drain(ctx, r.env.NewWalboxEOS(r.bin, "bench_walbox_eos", r.prefix("backlog", "walbox-eos"), c.WalboxLinger, c.EOSTxnInterval,
			filepath.Join(c.OutDir, "walbox-eos-backlog.log")), n, target, res.PayloadBytes, 0, nil, nil))
	}
	if c.Avro {
		prefix := r.prefix("backlog", "walbox-avro")
		if err := r.registry.register(prefix); err != nil {
			r.fail("backlog walbox-avro", err)
		} else {
			before := r.registry.requests.Load()
			record(r.drain(ctx, r.env.NewWalboxAvro(r.bin, "bench_walbox_avro", prefix, c.WalboxLinger, r.registry.URL(),
				filepath.Join(c.OutDir, "walbox-avro-backlog.log")), n, target, res.PayloadBytes, 0, nil, nil))
			a := r.res.Avro
			a.BacklogRequests, a.BacklogEvents = r.registry.requests.Load()-before, n
			a.RequestsPerMillion = float64(a.BacklogRequests) * 1e6 / float64(n)
		}
	}
	if c.CPUProfile != "" {
		onStart, onDone := r.profiler(c.CPUProfile, &r.res.CPUProfile)
		record(r.drain(ctx, r.env.NewWalbox("bench_walbox_inproc", r.prefix("backlog", "walbox-inproc"), c.WalboxLinger, r.cfg.Log), n, target, res.PayloadBytes, 0, onStart, onDone))
	}
	record(r.drain(ctx, r.env.NewCeiling("bench_ceiling", r.prefix("backlog", "ceiling")), n, target, res.PayloadBytes, 0, nil, nil))
	if c.WithDebezium && ctx.Err() == nil {
		record(r.drain(ctx, r.newDebezium("backlog"), n, target, res.PayloadBytes, 0, nil, nil))
	}
	for i, b := range c.PollBatches {
		if ctx.Err() != nil {
			return
		}
		if i > 0 {
			// The previous poll relay marked every row sent.
			if err := r.env.ResetOutbox(ctx); err != nil {
				r.fail("backlog", err)
				return
			}
			if target, ok = load(); !ok {
				return
			}
		} else if err := r.env.dropSlots(ctx); err != nil {
			r.fail("backlog", err)
			return
		}
		record(r.drain(ctx, r.env.NewPollRelay(b, r.prefix("backlog", fmt.Sprintf("poll%d", b))), n, target, res.PayloadBytes, c.PollDrainLimit, nil, nil))
	}
}

// profiler returns functions that start and stop a CPU profile of this
// process into path and then record path in *dst; both are nil when path is
// empty.
func (r *Runner) profiler(path string, dst *string) (start func() error, stop func()) {
	if path == "" {
		return nil, nil
	}
	var f *os.File
	start = func() error {
		var err error
		if f, err = os.Create(path); err != nil {
			return err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			_ = f.Close()
			return err
		}
		return nil
	}
	stop = func() {
		pprof.StopCPUProfile()
		_ = f.Close()
		*dst = path
	}
	return start, stop
}

// rssNote is ", peak RSS x MiB" for a run that measured it, else "".
func rssNote(b int64) string {
	if b <= 0 {
		return ""
	}
	return fmt.Sprintf(", peak RSS %.1f MiB", mib(b))
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
