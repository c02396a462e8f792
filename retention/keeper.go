package retention

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/walbox/walbox/slotctl"
)

// Keeper keeps the trailing slot: it creates it when missing and advances
// it as time passes to a position walbox confirmed at least the window
// ago. Create it with New; Run may be called once.
type Keeper struct {
	cfg       Config
	conn      *pgx.ConnConfig
	confirmed func() pglogrepl.LSN
	hist      *History
	log       *slog.Logger
	now       func() time.Time

	scanChanges int    // upto_nchanges of one read of the slot's stream
	announced   bool   // the start's "keeping the trailing slot" line was logged
	recovering  bool   // the last step advanced by the slot's own stream
	rewinds     uint64 // Config.Rewound's count last seen

	lag         prometheus.Gauge
	trailing    prometheus.Gauge
	advances    prometheus.Counter
	errors      prometheus.Counter
	windowSet   prometheus.Gauge
	interval    prometheus.Gauge
	lastCurrent prometheus.Gauge
	since       prometheus.Gauge
	recovery    prometheus.Gauge
	walStatus   *prometheus.GaugeVec
}

// walStatuses are the values of pg_replication_slots.wal_status that the
// wal_status gauges always carry (one of them 1, the others 0).
var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

// New builds a Keeper. confirmed returns the position walbox last
// confirmed to the server for the live slot (0 before the first
// confirmation, and on a standby); it is called from Run's goroutine and
// must be safe for concurrent use. cc is an ordinary (non-replication)
// connection configuration. Metrics go to reg.
func New(cfg Config, cc *pgx.ConnConfig, confirmed func() pglogrepl.LSN, reg prometheus.Registerer, log *slog.Logger) (*Keeper, error) {
	if err := Validate(cfg.Window, cfg.Slot, cfg.ReplaySlot); err != nil {
		return nil, err
	}
	if cfg.Window == 0 {
		return nil, fmt.Errorf("%w: window is 0 (disabled); do not start a Keeper", ErrInvalidConfig)
	}
	cfg.ReplaySlot = SlotName(cfg.Slot, cfg.ReplaySlot)
	cfg.setDefaults()
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	f := promauto.With(reg)
	k := &Keeper{
		cfg: cfg, conn: cc, confirmed: confirmed, log: log, now: now,
		hist: NewHistory(cfg.Window, cfg.Buckets), scanChanges: scanChanges,
		lag: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_replay_slot_lag_bytes",
			Help: "WAL between the trailing (replay) slot's confirmed position and the live slot's, in bytes: what walbox replay can still stream.",
		}),
		trailing: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_replay_slot_confirmed_lsn_bytes",
			Help: "Confirmed position of the trailing (replay) slot, in bytes.",
		}),
		advances: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_replay_slot_advances_total",
			Help: "Times the trailing (replay) slot was moved forwards.",
		}),
		errors: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_replay_slot_errors_total",
			Help: "Failed attempts to create, read or advance the trailing (replay) slot; each is logged and retried.",
		}),
		windowSet: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_replay_window_seconds",
			Help: "The configured replay window (--replay-window).",
		}),
		interval: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_replay_advance_interval_seconds",
			Help: "How often the trailing (replay) slot is advanced: window/16, between 1 s and 1 min.",
		}),
		lastCurrent: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_replay_slot_last_advance_timestamp_seconds",
			Help: "Unix time the trailing (replay) slot was last advanced to where the window wants it, or found there; the keeper's start until then.",
		}),
		since: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_replay_slot_retained_since_timestamp_seconds",
			Help: "Unix time from which on everything the trailing (replay) slot holds was confirmed (or committed); 0 until known.",
		}),
		recovery: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_replay_slot_recovering",
			Help: "1 while walbox has watched the live slot for less than the window and advances the trailing (replay) slot by the commit times of its own stream.",
		}),
		walStatus: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "walbox_replay_slot_wal_status",
			Help: "The trailing (replay) slot's pg_replication_slots.wal_status: 1 for the current one, 0 for the others; all 0 until read.",
		}, []string{"status"}),
	}
	for _, s := range walStatuses {
		k.walStatus.WithLabelValues(s).Set(0)
	}
	k.windowSet.Set(cfg.Window.Seconds())
	k.interval.Set(cfg.Interval.Seconds())
	return k, nil
}

// Run keeps the trailing slot until ctx ends, then returns nil. Failures
// of the database are logged, counted in walbox_replay_slot_errors_total
// and retried: the trailing slot serves replays, and the live stream must
// not stop for it. A slot of the trailing slot's name that walbox must not
// touch (ErrSlotMismatch) is returned: it is a configuration error.
func (k *Keeper) Run(ctx context.Context) error {
	k.lastCurrent.Set(unixSeconds(k.now()))
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = conn.Close(cctx)
		}
	}()
	ensured := false
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		err := k.attempt(ctx, &conn, &ensured)
		delay := k.cfg.Interval
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, ErrSlotMismatch) {
				return err
			}
			k.errors.Inc()
			k.log.Warn("could not keep the trailing slot; retrying", "replay_slot", k.cfg.ReplaySlot, "err", err,
				"retry_in", k.cfg.RetryDelay.String())
			if conn != nil && (conn.IsClosed() || !pgconnUsable(err)) {
				cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				_ = conn.Close(cctx)
				cancel()
				conn = nil
			}
			ensured = ensured && conn != nil
			delay = k.cfg.RetryDelay
		}
		t.Reset(delay)
	}
}

// attempt is one round of Run: connect if needed, make sure the trailing
// slot exists, and step. A step that the server refuses is explained by
// inspecting the slot again (an invalidation, a drop), so that every retry
// logs the reason and the fix, not only the first start.
func (k *Keeper) attempt(ctx context.Context, conn **pgx.Conn, ensured *bool) error {
	if *conn == nil {
		c, err := pgx.ConnectConfig(ctx, k.conn)
		if err != nil {
			return fmt.Errorf("connect: %w", err)
		}
		*conn = c
	}
	if !*ensured {
		if err := k.ensure(ctx, *conn); err != nil {
			return err
		}
		*ensured = true
	}
	err := k.step(ctx, pgSlots{conn: *conn, slot: k.cfg.Slot, replaySlot: k.cfg.ReplaySlot, publication: k.cfg.Publication})
	if err != nil && (pgconnUsable(err) || errors.Is(err, errLost)) {
		if _, ierr := k.inspect(ctx, *conn); ierr != nil {
			*ensured = false // recreate it once dropped
			return ierr
		}
	}
	return err
}

// ensure creates the trailing slot if missing and logs what it keeps.
func (k *Keeper) ensure(ctx context.Context, conn *pgx.Conn) error {
	info, created, err := EnsureSlot(ctx, conn, k.cfg.Slot, k.cfg.ReplaySlot)
	k.setWALStatus(info.WALStatus)
	if err != nil {
		return err
	}
	k.matchFailover(ctx, conn, info)
	switch {
	case created:
		k.log.Info("created the trailing slot as a copy of the live slot",
			"replay_slot", k.cfg.ReplaySlot, "slot", k.cfg.Slot, "lsn", info.ConfirmedFlushLSN.String(), "window", k.cfg.Window.String())
	case !k.announced:
		k.log.Info("keeping the trailing slot", "replay_slot", k.cfg.ReplaySlot, "lsn", info.ConfirmedFlushLSN.String(),
			"window", k.cfg.Window.String(), "wal_status", info.WALStatus)
	default:
		k.log.Info("keeping the trailing slot again", "replay_slot", k.cfg.ReplaySlot, "lsn", info.ConfirmedFlushLSN.String(),
			"wal_status", info.WALStatus)
	}
	k.announced = true
	k.trailing.Set(float64(info.ConfirmedFlushLSN))
	return nil
}

// inspect reads the trailing slot as EnsureSlot does (an invalidated one
// is slotctl.ErrSlotLost with the fix), and updates its wal_status gauge.
func (k *Keeper) inspect(ctx context.Context, conn slotctl.Querier) (slotctl.SlotInfo, error) {
	info, err := inspectTrailing(ctx, conn, "", k.cfg.ReplaySlot)
	if !errors.Is(err, slotctl.ErrSlotNotFound) {
		k.setWALStatus(info.WALStatus)
	}
	return info, err
}

func (k *Keeper) setWALStatus(status string) {
	for _, s := range walStatuses {
		v := 0.0
		if s == status {
			v = 1
		}
		k.walStatus.WithLabelValues(s).Set(v)
	}
}

// pgconnUsable reports whether a connection may be reused after err: a
// server error leaves it usable, anything else (I/O) does not.
func pgconnUsable(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr)
}

// slotDB is what a step needs from the database: pgSlots on a connection,
// a simulation in the cadence tests.
type slotDB interface {
	// advance is Advance on the keeper's two slots.
	advance(ctx context.Context, target pglogrepl.LSN) (Advanced, error)
	// scan reads the commits of the trailing slot's stream, at most
	// budget bytes of WAL past its position and about changes changes
	// (see scanSQL).
	scan(ctx context.Context, budget int64, changes int) (scanned, error)
}

// step records the live slot's confirmed position and advances the
// trailing slot to the newest position confirmed at least the window ago.
//
// The history is in memory, so for a window after a start it reaches back
// less than the window. Then, while this walbox streams (a standby leaves
// the slot to the active instance), the target comes from the trailing
// slot's own stream instead: past every transaction that committed at
// least the window ago, reading at most ScanBytes of WAL per step. So a
// restart does not stop the slot, however often it happens.
func (k *Keeper) step(ctx context.Context, db slotDB) error {
	now := k.now()
	if k.cfg.Rewound != nil {
		if n, to := k.cfg.Rewound(); n != k.rewinds {
			k.rewinds = n
			k.hist.Rewind(to)
			k.log.Info("the live slot's history switched: the trailing slot is advanced only by positions confirmed on the new history from now on, none past the shared part before the window",
				"replay_slot", k.cfg.ReplaySlot, "shared_until_lsn", to.String(), "window", k.cfg.Window.String())
		}
	}
	confirmed := k.confirmed()
	if confirmed != 0 {
		k.hist.Observe(now, confirmed)
	}
	target, since, current := k.hist.Target(now)
	recovering := !current && confirmed != 0 && k.cfg.Publication != ""
	if recovering != k.recovering {
		k.recovering = recovering
		if recovering {
			k.log.Info("advancing the trailing slot by the commit times of its own stream until walbox has watched the live slot for a window",
				"replay_slot", k.cfg.ReplaySlot, "window", k.cfg.Window.String(), "scan_bytes", k.cfg.ScanBytes)
		}
	}
	k.recovery.Set(b2f(recovering))
	var (
		a   Advanced
		err error
	)
	if recovering {
		a, target, since, current, err = k.recover(ctx, db, now)
	} else {
		// Without a target (less than a window since the start, and
		// nothing to recover from), the call only reads both positions,
		// for the metrics: a target of 0 never moves the slot.
		a, err = db.advance(ctx, target)
	}
	if err != nil {
		return err
	}
	if a.WALStatus != "" {
		k.setWALStatus(a.WALStatus)
	}
	if a.WALStatus == "lost" {
		// A target of 0, or one below the slot, does not touch it, so
		// the server would not say so.
		return errLost
	}
	k.trailing.Set(float64(a.After))
	k.lag.Set(float64(a.Live - min(a.After, a.Live)))
	if a.After != a.Before {
		k.advances.Inc()
		k.log.Debug("advanced the trailing slot", "replay_slot", k.cfg.ReplaySlot, "from", a.Before.String(), "lsn", a.After.String(),
			"target", target.String(), "live_lsn", a.Live.String())
	}
	if a.After >= a.Live {
		current, since = true, now // it holds nothing
	}
	if current && a.After >= min(target, a.Live) {
		k.lastCurrent.Set(unixSeconds(now))
		k.since.Set(unixSeconds(since))
	}
	return nil
}

// recover advances the trailing slot past the transactions of its own
// stream that committed at least the window before now: it reads the
// stream in pieces of scanChanges changes, advancing after each, while
// everything read is that old, and reads at most ScanBytes of WAL past the
// position it started from. It returns the last advance and its target,
// the time from which on the slot holds only later commits, and whether
// it is then where the window wants it.
func (k *Keeper) recover(ctx context.Context, db slotDB, now time.Time) (a Advanced, target pglogrepl.LSN, since time.Time, current bool, err error) {
	cut := now.Add(-k.cfg.Window)
	budget := k.cfg.ScanBytes
	var start pglogrepl.LSN
	for i := 0; ; i++ {
		s, err := db.scan(ctx, budget, k.scanChanges)
		if err != nil {
			return a, 0, since, false, err
		}
		target, since, current = s.target(cut, now)
		next, err := db.advance(ctx, target)
		if err != nil {
			return a, 0, since, false, err
		}
		if i == 0 {
			a, start = next, next.Before
		}
		a.After, a.Live = next.After, next.Live
		if current || !s.more || next.After == next.Before {
			return a, target, since, current, nil
		}
		if budget = k.cfg.ScanBytes - int64(a.After-start); budget <= 0 {
			return a, target, since, false, nil
		}
	}
}

// errLost: a step found the trailing slot invalidated; attempt replaces it
// with inspect's error, which says why and what to do.
var errLost = errors.New("the trailing slot was invalidated")

func unixSeconds(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
