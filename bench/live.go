package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// The two scenarios here run walbox while the work happens, as production
// does, since what they measure is how long walbox makes events wait behind
// a large transaction (protocol 1 holds back everything that commits after
// it until the server has decoded all of it, spilling to its disk what
// exceeds logical_decoding_work_mem):
//
//   - foreign-update: one UPDATE of every row of a table outside the
//     publication, while a writer commits one outbox event every
//     tickInterval before, during and after it;
//   - large-live: one outbox transaction of many rows, written while walbox
//     streams.

// ForeignTable is the table of the foreign-update scenario: not in the
// publication, so walbox must relay none of its changes.
const ForeignTable = "public.bench_foreign"

// tickInterval is the foreign-update writer's pace: one single-row outbox
// transaction every 10 ms, so the first event committed after the UPDATE
// follows its commit within about that.
const tickInterval = 10 * time.Millisecond

// foreignAfter is how long the writer goes on after the UPDATE committed.
// The latencies do not depend on it: every event written is waited for.
const foreignAfter = 3 * time.Second

// foreignWarm is how many events walbox must have delivered before the
// UPDATE starts (about a second of the writer), so the UPDATE meets a relay
// that streams, not one starting up.
const foreignWarm = 100

// ForeignUpdateResult is the foreign-update scenario.
type ForeignUpdateResult struct {
	Rows            int     `json:"rows"`
	PopulateSeconds float64 `json:"populate_seconds"`
	// UpdateSeconds is the UPDATE's own duration, from sending it to its
	// commit returning.
	UpdateSeconds float64 `json:"update_seconds"`
	// Events written before, during and after the UPDATE: "after" are those
	// whose INSERT was sent after the UPDATE's commit returned.
	EventsBefore int `json:"events_before"`
	EventsDuring int `json:"events_during"`
	EventsAfter  int `json:"events_after"`
	// FirstAfterLatencyMs is the first "after" event's latency, from its
	// commit returning to its arrival in Kafka; FirstAfterFraction is that
	// as a share of UpdateSeconds (target < 0.1).
	FirstAfterLatencyMs float64 `json:"first_after_latency_ms"`
	FirstAfterFraction  float64 `json:"first_after_fraction"`
	MaxAfterLatencyMs   float64 `json:"max_after_latency_ms"`
	MaxDuringLatencyMs  float64 `json:"max_during_latency_ms"`
	BeforeP50Ms         float64 `json:"before_p50_ms"`
	Received            int     `json:"received"`
	Lost                int     `json:"lost"`
	Duplicates          int     `json:"duplicates"`
	OrderViolations     int     `json:"order_violations"`
	liveProc
}

// LiveTxnResult is one large outbox transaction written while walbox runs.
type LiveTxnResult struct {
	Rows int `json:"rows"`
	// WriteSeconds runs from BEGIN to the commit returning (a COPY).
	WriteSeconds float64 `json:"write_seconds"`
	// FirstAfterCommitMs and LastAfterCommitMs are when the first and the
	// last event arrived in Kafka, from the commit returning (negative:
	// before it returned).
	FirstAfterCommitMs float64 `json:"first_after_commit_ms"`
	LastAfterCommitMs  float64 `json:"last_after_commit_ms"`
	// BeforeCommit counts events that arrived before the COMMIT was even
	// sent: anything but 0 means walbox produced an uncommitted change.
	BeforeCommit    int `json:"before_commit"`
	Received        int `json:"received"`
	Lost            int `json:"lost"`
	Duplicates      int `json:"duplicates"`
	OrderViolations int `json:"order_violations"`
	liveProc
}

// liveProc is what both scenarios read of the walbox process and the
// server.
type liveProc struct {
	PeakRSSBytes int64      `json:"peak_rss_bytes,omitempty"`
	CPUSeconds   float64    `json:"cpu_seconds"`
	SlotStats    *SlotStats `json:"slot_stats,omitempty"`
	OtherCPUPct  float64    `json:"other_cpu_pct"`
	Error        string     `json:"error,omitempty"`
}

// tickWrites is what the foreign-update writer committed: per event id
// from firstID, when its INSERT was sent and when its commit returned (0:
// never). written is published after both are set.
type tickWrites struct {
	firstID  int64
	sentAt   []time.Duration
	commitAt []time.Duration
	written  atomic.Int64
}

// tickWriter commits one single-row outbox transaction every interval on
// one connection (so each aggregate's events commit in id order) until stop
// is closed or capacity events are written.
func (e *Env) tickWriter(ctx context.Context, firstID int64, capacity, aggregates int, interval time.Duration, clk Clock, stop <-chan struct{}) (*tickWrites, error) {
	w := &tickWrites{firstID: firstID, sentAt: make([]time.Duration, capacity), commitAt: make([]time.Duration, capacity)}
	conn, err := e.Connect(ctx)
	if err != nil {
		return w, err
	}
	defer conn.Close(context.Background())
	g := newGenerator(uint64(firstID), aggregates)
	var r row
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for i := range capacity {
		select {
		case <-stop:
			return w, nil
		case <-ctx.Done():
			return w, ctx.Err()
		case <-tick.C:
		}
		g.next(firstID+int64(i), &r)
		w.sentAt[i] = clk.Now()
		if _, err := conn.Exec(ctx, insertSQL(1), r.id, r.aggType, r.aggID, r.eventType, string(r.payload), string(r.headers)); err != nil {
			return w, fmt.Errorf("insert event %d: %w", r.id, err)
		}
		w.commitAt[i] = clk.Now()
		w.written.Store(int64(i + 1))
	}
	return w, nil
}

// foreignFigures computes the scenario's latencies from what the writer
// committed and when the consumer received it (recvAt, indexed like
// sentAt; 0 = never), given when the UPDATE was sent and its commit
// returned.
func foreignFigures(res *ForeignUpdateResult, sentAt, commitAt, recvAt []time.Duration, updSent, updDone time.Duration) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	var before []time.Duration
	firstAfter := true
	for i, at := range commitAt {
		if at == 0 {
			continue
		}
		recv := recvAt[i]
		if recv == 0 {
			res.Lost++
			continue
		}
		lat := recv - at
		switch {
		case sentAt[i] >= updDone:
			res.EventsAfter++
			if firstAfter {
				res.FirstAfterLatencyMs, firstAfter = ms(lat), false
			}
			res.MaxAfterLatencyMs = max(res.MaxAfterLatencyMs, ms(lat))
		case at > updSent:
			res.EventsDuring++
			res.MaxDuringLatencyMs = max(res.MaxDuringLatencyMs, ms(lat))
		default:
			res.EventsBefore++
			before = append(before, lat)
		}
	}
	res.BeforeP50Ms = latencyStats(before).P50Ms
	if d := ms(updDone - updSent); d > 0 && !firstAfter {
		res.FirstAfterFraction = res.FirstAfterLatencyMs / d
	}
}

// liveTxnFigures computes the large-live figures from when each event
// arrived (0 = never), the COMMIT being sent and its return.
func liveTxnFigures(res *LiveTxnResult, recvAt []time.Duration, commitSent, committed time.Duration) {
	var first, last time.Duration
	for _, recv := range recvAt {
		if recv == 0 {
			res.Lost++
			continue
		}
		if recv < commitSent {
			res.BeforeCommit++
		}
		if first == 0 || recv < first {
			first = recv
		}
		last = max(last, recv)
	}
	if last > 0 {
		res.FirstAfterCommitMs = float64(first-committed) / float64(time.Millisecond)
		res.LastAfterCommitMs = float64(last-committed) / float64(time.Millisecond)
	}
}

// startLiveWalbox starts walbox on a fresh slot with its topics and a
// consumer reading them with the order check, resets the slot's server
// statistics and waits until walbox streams (its walsender holds the slot).
func (r *Runner) startLiveWalbox(ctx context.Context, scenario string, firstID int64, capacity int, clk Clock) (*walboxProc, *latencyConsumer, error) {
	logPath := filepath.Join(r.cfg.OutDir, "walbox-"+scenario+".log")
	w := r.env.NewWalboxProcess(r.bin, "bench_walbox", r.prefix(scenario, "walbox"), r.cfg.WalboxLinger, logPath)
	if err := r.env.CreateTopics(ctx, partitionsPerTopic, w.Topics()...); err != nil {
		return nil, nil, err
	}
	cons, err := r.env.startConsumerOrder(w.Topics(), firstID, capacity, clk, true)
	if err != nil {
		return nil, nil, err
	}
	if err := w.Start(ctx); err != nil {
		_ = cons.stop()
		return nil, nil, err
	}
	if err := r.env.ResetSlotStats(ctx, w.Slot()); err != nil {
		_ = w.Stop()
		_ = cons.stop()
		return nil, nil, err
	}
	if err := r.waitSlotActive(ctx, w); err != nil {
		_ = w.Stop()
		_ = cons.stop()
		return nil, nil, err
	}
	return w, cons, nil
}

// waitSlotActive waits until walbox's walsender holds its slot.
func (r *Runner) waitSlotActive(ctx context.Context, w *walboxProc) error {
	conn, err := r.env.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	deadline := time.Now().Add(time.Minute)
	for {
		var active bool
		if err := conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, w.Slot()).Scan(&active); err != nil {
			return fmt.Errorf("slot %s: %w", w.Slot(), err)
		}
		if active {
			return nil
		}
		if err := w.Err(); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("walbox did not start streaming slot %s within a minute; see %s", w.Slot(), w.logPath)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// finishLive reads walbox's peak RSS and CPU, stops it, and reads the
// slot's settled statistics.
func (r *Runner) finishLive(ctx context.Context, w *walboxProc, p *liveProc, watch cpuWatch, cpu0 time.Duration) error {
	p.OtherCPUPct = watch.otherPct()
	var errs []error
	if rss, err := w.PeakRSS(); err == nil {
		p.PeakRSSBytes = rss
	} else {
		errs = append(errs, err)
	}
	if cpu, err := w.CPU(); err == nil {
		p.CPUSeconds = (cpu - cpu0).Seconds()
	}
	errs = append(errs, w.Stop())
	st, err := r.env.SlotStats(ctx, w.Slot())
	p.SlotStats = &st
	return errors.Join(append(errs, err)...)
}

// foreignUpdate runs the foreign-update scenario.
func (r *Runner) foreignUpdate(ctx context.Context) {
	c := r.cfg
	res := &ForeignUpdateResult{Rows: c.ForeignRows}
	r.res.ForeignUpdate = res
	fail := func(err error) {
		res.Error = err.Error()
		r.fail("foreign-update", err)
	}
	if err := r.env.ResetOutbox(ctx); err != nil {
		fail(err)
		return
	}
	r.progress("foreign-update: writing %d rows into %s (not in the publication), before walbox's slot exists", c.ForeignRows, ForeignTable)
	t0 := time.Now()
	if err := r.env.populateForeign(ctx, c.ForeignRows); err != nil {
		fail(err)
		return
	}
	res.PopulateSeconds = time.Since(t0).Seconds()
	defer func() {
		if err := r.env.dropForeign(context.WithoutCancel(ctx)); err != nil {
			r.fail("foreign-update", err)
		}
	}()

	// Capacity: the writer's pace over the longest run the drain timeout
	// allows.
	capacity := int(c.DrainTimeout/tickInterval) + 1
	firstID := r.ids(capacity)
	clk := NewClock()
	w, cons, err := r.startLiveWalbox(ctx, "foreign-update", firstID, capacity, clk)
	if err != nil {
		fail(err)
		return
	}
	defer func() { _ = w.Stop() }()
	stop := make(chan struct{})
	type written struct {
		w   *tickWrites
		err error
	}
	done := make(chan written, 1)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		tw, err := r.env.tickWriter(wctx, firstID, capacity, c.Aggregates, tickInterval, clk, stop)
		done <- written{tw, err}
	}()
	stopWriter := func() written { close(stop); return <-done }
	if !cons.waitFor(ctx, foreignWarm, time.Minute) {
		wr := stopWriter()
		_ = cons.stop()
		fail(errors.Join(fmt.Errorf("walbox delivered %d of the first %d events within a minute; see %s", cons.received.Load(), foreignWarm, w.logPath), wr.err, w.Err()))
		return
	}

	watch, cpu0 := r.env.startCPUWatch(), relayCPU(w)
	r.progress("foreign-update: UPDATE %s SET v = v + 1 (%d rows, one transaction) while one outbox event commits every %s", ForeignTable, c.ForeignRows, tickInterval)
	conn, err := r.env.Connect(ctx)
	if err != nil {
		stopWriter()
		_ = cons.stop()
		fail(err)
		return
	}
	updSent := clk.Now()
	_, err = conn.Exec(ctx, `UPDATE `+ForeignTable+` SET v = v + 1`)
	updDone := clk.Now()
	conn.Close(context.Background())
	if err != nil {
		stopWriter()
		_ = cons.stop()
		fail(fmt.Errorf("UPDATE %s: %w", ForeignTable, err))
		return
	}
	res.UpdateSeconds = (updDone - updSent).Seconds()
	r.progress("foreign-update: UPDATE committed after %.2fs; writing %s more", res.UpdateSeconds, foreignAfter)
	select {
	case <-time.After(foreignAfter):
	case <-ctx.Done():
	}
	wr := stopWriter()
	if wr.err != nil {
		_ = cons.stop()
		fail(wr.err)
		return
	}
	n := int(wr.w.written.Load())
	var waitErr error
	if !cons.waitFor(ctx, n, c.DrainTimeout) {
		waitErr = fmt.Errorf("%d of %d events received within %s", cons.received.Load(), n, c.DrainTimeout)
	}
	finErr := r.finishLive(ctx, w, &res.liveProc, watch, cpu0)
	consErr := cons.stop()
	res.Received, res.Duplicates, res.OrderViolations = int(cons.received.Load()), int(cons.dups.Load()), int(cons.disorder.Load())
	foreignFigures(res, wr.w.sentAt[:n], wr.w.commitAt[:n], cons.recvAt[:n], updSent, updDone)
	if res.OrderViolations > 0 {
		waitErr = errors.Join(waitErr, fmt.Errorf("%d events arrived out of per-aggregate order", res.OrderViolations))
	}
	if err := errors.Join(waitErr, finErr, consErr); err != nil {
		fail(err)
		return
	}
	r.progress("foreign-update: UPDATE %.2fs; first event committed after it arrived %.0f ms after its commit (%.3f of the UPDATE's duration); spill %s, stream %s%s (other processes: %.0f%% CPU)",
		res.UpdateSeconds, res.FirstAfterLatencyMs, res.FirstAfterFraction, mibCell(res.SlotStats.SpillBytes), mibCell(res.SlotStats.StreamBytes), rssNote(res.PeakRSSBytes), res.OtherCPUPct)
}

// populateForeign (re)creates ForeignTable with rows rows and vacuums it,
// so the UPDATE meets a table in its steady state.
func (e *Env) populateForeign(ctx context.Context, rows int) error {
	conn, err := e.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	for _, q := range []string{
		`DROP TABLE IF EXISTS ` + ForeignTable,
		`CREATE TABLE ` + ForeignTable + ` (id bigint PRIMARY KEY, v bigint NOT NULL)`,
		`INSERT INTO ` + ForeignTable + ` SELECT g, 0 FROM generate_series(1, ` + strconv.Itoa(rows) + `) g`,
		`VACUUM ` + ForeignTable,
		`CHECKPOINT`,
	} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("prepare %s: %s: %w", ForeignTable, q, err)
		}
	}
	return nil
}

func (e *Env) dropForeign(ctx context.Context) error {
	conn, err := e.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `DROP TABLE IF EXISTS `+ForeignTable); err != nil {
		return fmt.Errorf("drop %s: %w", ForeignTable, err)
	}
	return nil
}

// largeLive runs the large-live scenario for each size.
func (r *Runner) largeLive(ctx context.Context) {
	for _, size := range r.cfg.LargeLive {
		if ctx.Err() != nil {
			return
		}
		res := LiveTxnResult{Rows: size}
		if err := r.largeLiveRun(ctx, &res); err != nil {
			res.Error = err.Error()
			r.fail(fmt.Sprintf("large-live %d", size), err)
		} else {
			r.progress("large-live: %d rows: last event %.0f ms after COMMIT returned (first %.0f ms); %d received, %d lost, %d duplicates, %d out of order, %d before COMMIT; spill %s, stream %s%s (other processes: %.0f%% CPU)",
				size, res.LastAfterCommitMs, res.FirstAfterCommitMs, res.Received, res.Lost, res.Duplicates, res.OrderViolations, res.BeforeCommit,
				mibCell(res.SlotStats.SpillBytes), mibCell(res.SlotStats.StreamBytes), rssNote(res.PeakRSSBytes), res.OtherCPUPct)
		}
		r.res.LargeLive = append(r.res.LargeLive, res)
	}
}

func (r *Runner) largeLiveRun(ctx context.Context, res *LiveTxnResult) error {
	size := res.Rows
	if err := r.env.ResetOutbox(ctx); err != nil {
		return err
	}
	firstID := r.ids(size)
	clk := NewClock()
	w, cons, err := r.startLiveWalbox(ctx, "large-live", firstID, size, clk)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	conn, err := r.env.Connect(ctx)
	if err != nil {
		_ = cons.stop()
		return err
	}
	defer conn.Close(context.Background())

	r.progress("large-live: writing one transaction of %d rows while walbox streams", size)
	watch, cpu0 := r.env.startCPUWatch(), relayCPU(w)
	begin := clk.Now()
	src := &copySource{g: newGenerator(uint64(firstID), r.cfg.Aggregates), first: firstID, n: size}
	src.g.size = payloadSize
	tx, err := conn.Begin(ctx)
	if err == nil {
		_, err = tx.CopyFrom(ctx, pgx.Identifier{"public", "outbox"}, outboxColumns, src)
	}
	commitSent := clk.Now()
	if err == nil {
		err = tx.Commit(ctx)
	}
	committed := clk.Now()
	if err != nil {
		_ = cons.stop()
		return fmt.Errorf("write %d rows in one transaction: %w", size, err)
	}
	res.WriteSeconds = (committed - begin).Seconds()

	var waitErr error
	if !cons.waitFor(ctx, size, r.cfg.DrainTimeout) {
		waitErr = fmt.Errorf("%d of %d events received within %s", cons.received.Load(), size, r.cfg.DrainTimeout)
	}
	finErr := r.finishLive(ctx, w, &res.liveProc, watch, cpu0)
	consErr := cons.stop()
	res.Received, res.Duplicates, res.OrderViolations = int(cons.received.Load()), int(cons.dups.Load()), int(cons.disorder.Load())
	liveTxnFigures(res, cons.recvAt, commitSent, committed)
	if res.BeforeCommit > 0 {
		waitErr = errors.Join(waitErr, fmt.Errorf("%d events arrived in Kafka before the transaction's COMMIT was sent", res.BeforeCommit))
	}
	if res.OrderViolations > 0 {
		waitErr = errors.Join(waitErr, fmt.Errorf("%d events arrived out of per-aggregate order", res.OrderViolations))
	}
	return errors.Join(waitErr, finErr, consErr)
}

// mibCell is a byte count in MiB, "0" for none.
func mibCell(b int64) string {
	if b == 0 {
		return "0"
	}
	return fmt.Sprintf("%.1f MiB", mib(b))
}
