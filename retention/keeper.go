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

	lag       prometheus.Gauge
	trailing  prometheus.Gauge
	advances  prometheus.Counter
	errors    prometheus.Counter
	windowSet prometheus.Gauge
}

// New builds a Keeper. confirmed returns the position walbox last
// confirmed to the server for the live slot (0 before the first
// confirmation); it is called from Run's goroutine and must be safe for
// concurrent use. cc is an ordinary (non-replication) connection
// configuration. Metrics go to reg.
func New(cfg Config, cc *pgx.ConnConfig, confirmed func() pglogrepl.LSN, reg prometheus.Registerer, log *slog.Logger) (*Keeper, error) {
	if err := Validate(cfg.Window, cfg.Slot, cfg.ReplaySlot); err != nil {
		return nil, err
	}
	if cfg.Window == 0 {
		return nil, fmt.Errorf("%w: window is 0 (disabled); do not start a Keeper", ErrInvalidConfig)
	}
	cfg.ReplaySlot = SlotName(cfg.Slot, cfg.ReplaySlot)
	cfg.setDefaults()
	f := promauto.With(reg)
	k := &Keeper{
		cfg: cfg, conn: cc, confirmed: confirmed, log: log, now: time.Now,
		hist: NewHistory(cfg.Window, cfg.Buckets),
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
	}
	k.windowSet.Set(cfg.Window.Seconds())
	return k, nil
}

// Run keeps the trailing slot until ctx ends, then returns nil. Failures
// of the database are logged, counted in walbox_replay_slot_errors_total
// and retried: the trailing slot serves replays, and the live stream must
// not stop for it. A slot of the trailing slot's name that walbox must not
// touch (ErrSlotMismatch) is returned: it is a configuration error.
func (k *Keeper) Run(ctx context.Context) error {
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
		err := func() error {
			if conn == nil {
				c, err := pgx.ConnectConfig(ctx, k.conn)
				if err != nil {
					return fmt.Errorf("connect: %w", err)
				}
				conn = c
			}
			if !ensured {
				info, created, err := EnsureSlot(ctx, conn, k.cfg.Slot, k.cfg.ReplaySlot)
				if err != nil {
					return err
				}
				ensured = true
				if created {
					k.log.Info("created the trailing slot as a copy of the live slot",
						"replay_slot", k.cfg.ReplaySlot, "slot", k.cfg.Slot, "lsn", info.ConfirmedFlushLSN.String(), "window", k.cfg.Window.String())
				} else {
					k.log.Info("keeping the trailing slot", "replay_slot", k.cfg.ReplaySlot, "lsn", info.ConfirmedFlushLSN.String(),
						"window", k.cfg.Window.String(), "wal_status", info.WALStatus)
				}
				k.trailing.Set(float64(info.ConfirmedFlushLSN))
			}
			return k.step(ctx, conn)
		}()
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

// pgconnUsable reports whether a connection may be reused after err: a
// server error leaves it usable, anything else (I/O) does not.
func pgconnUsable(err error) bool {
	var pgErr interface{ SQLState() string }
	return errors.As(err, &pgErr)
}

// step records the live slot's confirmed position and advances the
// trailing slot to the newest position confirmed at least the window ago.
func (k *Keeper) step(ctx context.Context, conn *pgx.Conn) error {
	now := k.now()
	if lsn := k.confirmed(); lsn != 0 {
		k.hist.Observe(now, lsn)
	}
	// Without a target yet (less than a window since the start), the
	// call only reads both positions, for the metrics: a target of 0 never
	// moves the slot.
	target, _, _ := k.hist.Target(now)
	a, err := Advance(ctx, conn, k.cfg.Slot, k.cfg.ReplaySlot, target)
	if err != nil {
		return err
	}
	k.trailing.Set(float64(a.After))
	k.lag.Set(float64(a.Live - min(a.After, a.Live)))
	if a.After != a.Before {
		k.advances.Inc()
		k.log.Debug("advanced the trailing slot", "replay_slot", k.cfg.ReplaySlot, "from", a.Before.String(), "lsn", a.After.String(),
			"target", target.String(), "live_lsn", a.Live.String())
	}
	return nil
}
