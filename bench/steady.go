package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"
)

// warmup is how long the writer writes before a measured steady run, at
// the run's rate, with ids the consumer ignores. The relay connects, learns
// its topics' partitions and initialises its idempotent producer (300 ms
// on Kafka 4 here) during it, so the measured events' latency is the
// relay's steady state rather than its start.
const warmup = time.Second

// settle is the pause after the warm-up, for its events to drain.
const settle = time.Second

// steady runs the steady-load scenario: the writer alone (the baseline for
// the database cost), then the same load with each relay.
func (r *Runner) steady(ctx context.Context) {
	c := r.cfg
	res := &SteadyResult{TargetRate: c.Rate, DurationSeconds: c.Duration.Seconds()}
	r.res.Steady = res
	load := SteadyLoad{Rate: c.Rate, Duration: c.Duration, MinTxn: 1, MaxTxn: 10, Conns: c.WriterConns, Aggregates: c.Aggregates}

	// The writer's own cost per event does not depend on the run's length;
	// a shorter baseline saves time.
	base := load
	base.Duration = min(load.Duration, 10*time.Second)
	b := r.steadyRun(ctx, noRelay{}, base, nil, nil)
	res.Baseline = &b

	relays := []func() Relay{
		func() Relay {
			return r.env.NewWalboxProcess(r.bin, "bench_walbox", r.prefix("steady", "walbox"), c.WalboxLinger, filepath.Join(c.OutDir, "walbox-steady.log"))
		},
	}
	if c.ExactlyOnce {
		relays = append(relays, func() Relay {
			return r.env.NewWalboxEOS(r.bin, "bench_walbox_eos", r.prefix("steady", "walbox-eos"), c.WalboxLinger, c.EOSTxnInterval, filepath.Join(c.OutDir, "walbox-eos-steady.log"))
		})
	}
	if c.CPUProfile != "" {
		relays = append(relays, func() Relay {
			return r.env.NewWalbox("bench_walbox_inproc", r.prefix("steady", "walbox-inproc"), c.WalboxLinger, r.cfg.Log)
		})
	}
	if c.SteadyCeiling {
		relays = append(relays, func() Relay { return r.env.NewCeiling("bench_ceiling", r.prefix("steady", "ceiling")) })
	}
	if c.WithDebezium {
		relays = append(relays, func() Relay { return r.newDebezium("steady") })
	}
	for _, batch := range c.PollBatches {
		relays = append(relays, func() Relay { return r.env.NewPollRelay(batch, r.prefix("steady", fmt.Sprintf("poll%d", batch))) })
	}
	for _, mk := range relays {
		if ctx.Err() != nil {
			return
		}
		rel := mk()
		var start func() error
		var stop func()
		if _, ok := rel.(*walboxRelay); ok && c.CPUProfile != "" {
			start, stop = r.profiler(strings.TrimSuffix(c.CPUProfile, ".pprof")+"-steady.pprof", &r.res.SteadyCPUProfile)
		}
		run := r.steadyRun(ctx, rel, load, start, stop)
		if run.Error == "" && b.Error == "" {
			run.DB = run.DB.minus(b.DB, run.Events)
		}
		res.Runs = append(res.Runs, run)
	}
	if c.Avro && ctx.Err() == nil {
		// At the rate for the Avro latency target; its database
		// cost is not the baseline's rate, so it is left absolute.
		prefix := r.prefix("steady", "walbox-avro")
		if err := r.registry.register(prefix); err != nil {
			r.fail("steady walbox-avro", err)
			return
		}
		avroLoad := load
		avroLoad.Rate = avroSteadyRate
		before := r.registry.requests.Load()
		run := r.steadyRun(ctx, r.env.NewWalboxAvro(r.bin, "bench_walbox_avro", prefix, c.WalboxLinger, r.registry.URL(),
			filepath.Join(c.OutDir, "walbox-avro-steady.log")), avroLoad, nil, nil)
		r.res.Avro.SteadyRequests = r.registry.requests.Load() - before
		res.Runs = append(res.Runs, run)
	}
}

// steadyRun runs the writer at the steady load with rel relaying and a
// consumer timing every event.
// profStart and profStop, if not nil, bracket the measured writing.
func (r *Runner) steadyRun(ctx context.Context, rel Relay, load SteadyLoad, profStart func() error, profStop func()) (run SteadyRun) {
	run.Relay = rel.Name()
	defer func() {
		if run.Error != "" {
			r.fail("steady "+run.Relay, errors.New(run.Error))
			return
		}
		r.progress("steady:  %-18s %6d events at %5.0f/s: p50 %7.1f ms  p95 %7.1f ms  p99 %7.1f ms  max %7.1f ms  lost %d%s  (other processes: %.0f%% CPU)",
			run.Relay, run.Events, run.AchievedRate, run.Latency.P50Ms, run.Latency.P95Ms, run.Latency.P99Ms, run.Latency.MaxMs, run.Lost, rssNote(run.PeakRSSBytes), run.OtherCPUPct)
	}()
	r.progress("steady:  %s, %d events/s for %s", rel.Name(), load.Rate, load.Duration)
	if err := r.env.ResetOutbox(ctx); err != nil {
		run.Error = err.Error()
		return run
	}
	// Ids of the measured events; the warm-up's come after them, so the
	// consumer counts those as foreign.
	firstID := r.ids(load.maxEvents())
	clk := NewClock()
	var cons *latencyConsumer
	if topics := rel.Topics(); len(topics) > 0 {
		if err := r.env.CreateTopics(ctx, topicPartitions(rel), topics...); err != nil {
			run.Error = err.Error()
			return run
		}
		var err error
		if cons, err = r.env.startConsumer(topics, firstID, load.maxEvents(), clk); err != nil {
			run.Error = err.Error()
			return run
		}
		defer func() {
			if err := cons.stop(); err != nil && run.Error == "" {
				run.Error = err.Error()
			}
		}()
	}
	if err := rel.Start(ctx); err != nil {
		run.Error = err.Error()
		return run
	}
	stopped := false
	stop := func() error {
		if stopped {
			return nil
		}
		stopped = true
		return rel.Stop()
	}
	defer stop() //nolint:errcheck // stopped explicitly on success
	warm := load
	warm.Duration = warmup
	if rr, ok := rel.(readyRelay); ok {
		warm.Duration = rr.Warmup()
	}
	if _, err := r.env.Write(ctx, warm, r.ids(warm.maxEvents()), clk); err != nil {
		run.Error = "warm-up: " + err.Error()
		return run
	}
	time.Sleep(settle)

	before, err := r.env.snapshot(ctx)
	if err != nil {
		run.Error = err.Error()
		return run
	}
	sr, _ := rel.(slotRelay)
	if sr != nil {
		if err := r.resetSlotStats(ctx, sr.Slot()); err != nil {
			run.Error = err.Error()
			return run
		}
	}
	watch, cpu0 := r.env.startCPUWatch(), relayCPU(rel)
	if profStart != nil {
		if err := profStart(); err != nil {
			run.Error = err.Error()
			return run
		}
	}
	wr, err := r.env.Write(ctx, load, firstID, clk)
	if profStop != nil {
		profStop()
	}
	run.OtherCPUPct = watch.otherPct()
	if err != nil {
		run.Error = err.Error()
		return run
	}
	run.Events = wr.Events
	run.AchievedRate = wr.AchievedRate()
	run.WriterMaxLagMs = float64(wr.MaxLag) / float64(time.Millisecond)
	var waitErr error
	if cons != nil && !cons.waitFor(ctx, wr.Events, min(r.cfg.DrainTimeout, 2*time.Minute)) {
		waitErr = fmt.Errorf("%d of %d events received before the timeout", cons.received.Load(), wr.Events)
	}
	if err := rel.Err(); err != nil {
		waitErr = errors.Join(waitErr, err)
	}
	if pr, ok := rel.(procRelay); ok && waitErr == nil {
		rss, err := pr.PeakRSS()
		run.PeakRSSBytes, waitErr = rss, err
		if cpu := relayCPU(rel); cpu >= 0 && cpu0 >= 0 {
			run.CPUSeconds = (cpu - cpu0).Seconds()
		}
	}
	stopErr := stop()
	if topics := rel.Topics(); len(topics) > 0 {
		run.RecordsPerBatch = r.env.sampleBatches(ctx, topics, wr.Events)
	}
	flushStats()
	after, serr := r.env.snapshot(ctx)
	if sr != nil {
		st, e := r.env.SlotStats(ctx, sr.Slot())
		run.SlotStats, serr = &st, errors.Join(serr, e)
	}
	if err := errors.Join(waitErr, stopErr, serr); err != nil {
		run.Error = err.Error()
	}
	run.DB = dbCost(before, after, wr.Events)
	if cons == nil {
		return run
	}
	cons.cancel()
	cons.wg.Wait()
	run.Received = int(cons.received.Load())
	run.Duplicates = int(cons.dups.Load())
	lat := make([]time.Duration, 0, wr.Events)
	var perSecond [][]time.Duration
	for i, at := range wr.CommitAt {
		switch recv := cons.recvAt[i]; {
		case at == 0:
		case recv == 0:
			run.Lost++
		default:
			lat = append(lat, recv-at)
			sec := int((at - wr.CommitAt[0]) / time.Second)
			for len(perSecond) <= sec {
				perSecond = append(perSecond, nil)
			}
			perSecond[sec] = append(perSecond[sec], recv-at)
		}
	}
	for _, l := range perSecond {
		run.P99PerSecondMs = append(run.P99PerSecondMs, latencyStats(l).P99Ms)
	}
	run.Latency = latencyStats(lat)
	run.latencies = lat
	return run
}
