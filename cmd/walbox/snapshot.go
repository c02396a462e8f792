package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
	"github.com/walbox/walbox/tracing"
)

// setupSlotOrTakeover prepares the slot: with --snapshot none as
// setupSlot does, refusing to stream while an earlier takeover's snapshot
// is unfinished; otherwise through snapshot.Takeover, which creates the
// slot with an exported snapshot where setupSlot would create it and sends
// the snapshot's rows with producer before returning.
func setupSlotOrTakeover(ctx context.Context, cfg config.Config, rt *router.Router, producer snapshot.Producer, tracer *tracing.Tracer, log *slog.Logger) (slotctl.SlotInfo, error) {
	scfg := cfg.SnapshotConfig()
	scfg.Tracer = tracer
	if scfg.Mode == snapshot.ModeNone {
		// Checked first, so that a missing slot under an unfinished
		// snapshot is explained as such, not as a vanished slot; and under
		// the takeover's lock, held until the slot is ready, so that a
		// takeover beginning meanwhile in another walbox is either seen
		// (its marker) or waits for this start to have the slot.
		pub, slot := cfg.SlotctlConfig().WithDefaults().Publication, cfg.SlotctlConfig().WithDefaults().Slot
		var release func()
		err := retryPostgres(ctx, cfg, log, func() error {
			var err error
			release, err = snapshot.LockNotPending(ctx, cfg.PGDSN, pub, slot, log)
			return err
		})
		if err != nil {
			return slotctl.SlotInfo{}, err
		}
		defer release()
		return setupSlot(ctx, cfg, rt, log)
	}
	return takeover(ctx, cfg, scfg, rt, producer, log)
}

// takeover runs snapshot.Takeover, retrying while Postgres is unreachable
// like setupSlot: a retry after the snapshot began takes it again.
func takeover(ctx context.Context, cfg config.Config, scfg snapshot.Config, rt *router.Router, producer snapshot.Producer, log *slog.Logger) (slotctl.SlotInfo, error) {
	sl := runSlotctlConfig(cfg, rt, nil)
	if cfg.MessagePrefix != "" {
		// The checks slotctl.Setup makes before creating anything.
		if _, err := setupCheckEmit(ctx, cfg, log); err != nil {
			return slotctl.SlotInfo{}, err
		}
	}
	for attempt := 0; ; attempt++ {
		res, err := snapshot.Takeover(ctx, snapshot.Options{
			ConnString: cfg.PGDSN, Slotctl: sl, Snapshot: scfg, Router: rt, Producer: producer,
			Logger: log, SlotBusyTimeout: cfg.SlotBusyTimeout,
		})
		if err == nil {
			log.Info("slot ready", "slot", res.Slot.Name, "confirmed_lsn", res.Slot.ConfirmedFlushLSN.String(),
				"snapshot_taken", res.Taken, "snapshot_rows", res.Stats.Produced)
			return res.Slot, nil
		}
		if ctx.Err() != nil {
			return slotctl.SlotInfo{}, fmt.Errorf("takeover stopped: %w", ctx.Err())
		}
		if !pipeline.IsRetryable(err) || errors.Is(err, snapshot.ErrProduce) {
			return slotctl.SlotInfo{}, err
		}
		delay := pipeline.Backoff(attempt, cfg.ReconnectBackoffMin, cfg.ReconnectBackoffMax)
		log.Warn("postgres not reachable during the takeover, retrying (an unfinished snapshot is taken again)",
			"err", err, "retry_in", delay.String(), "attempt", attempt+1)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return slotctl.SlotInfo{}, fmt.Errorf("takeover stopped: %w", ctx.Err())
		}
	}
}

// setupCheckEmit runs the pg_logical_emit_message privilege check of
// slotctl.Setup (--message-prefix), which a takeover must not skip.
func setupCheckEmit(ctx context.Context, cfg config.Config, log *slog.Logger) (bool, error) {
	conn, err := connectOrdinary(ctx, cfg.PGDSN)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	err = slotctl.CheckEmitMessagePrivilege(ctx, conn)
	switch {
	case errors.Is(err, slotctl.ErrEmitMessagePublic) && cfg.MessagePrefixAllowPublic:
		log.Warn("starting with message routing although every database role may emit outbox messages "+
			"(--message-prefix-allow-public); apply migrations/004_emit_message_privilege.sql to close this", "err", err)
	case errors.Is(err, slotctl.ErrEmitMessagePublic):
		return false, fmt.Errorf("%w\n(to start anyway, accepting that any role may forge events, pass --message-prefix-allow-public)", err)
	case err != nil:
		return false, err
	}
	return true, nil
}

func connectOrdinary(ctx context.Context, dsn string) (*pgx.Conn, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("connect to postgres: %w", err)
	}
	return conn, nil
}

// retryPostgres runs f until it succeeds, fails for good or ctx ends,
// retrying while pipeline.IsRetryable says Postgres is only unreachable.
func retryPostgres(ctx context.Context, cfg config.Config, log *slog.Logger, f func() error) error {
	for attempt := 0; ; attempt++ {
		err := f()
		if err == nil || ctx.Err() != nil || !pipeline.IsRetryable(err) {
			return err
		}
		delay := pipeline.Backoff(attempt, cfg.ReconnectBackoffMin, cfg.ReconnectBackoffMax)
		log.Warn("postgres not reachable, retrying", "err", err, "retry_in", delay.String(), "attempt", attempt+1)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("stopped while waiting for postgres: %w", ctx.Err())
		}
	}
}
