package slotctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ensure prepares the server for walbox in the order that works: Check,
// which reports every problem at once and changes nothing, then
// EnsurePublication, then EnsureSlot (the publication must exist before
// the slot, see the package doc), which verify again what they find, as
// another process may have made it meanwhile. It returns what Preflight
// and EnsureSlot found. `walbox run` (through Setup) and `slotctl create`
// use it.
func Ensure(ctx context.Context, conn Querier, cfg Config) (ServerInfo, SlotInfo, error) {
	plan, err := Check(ctx, conn, cfg)
	info := plan.Server
	if err != nil {
		return info, SlotInfo{}, err
	}
	if err := EnsurePublication(ctx, conn, cfg); err != nil {
		return info, SlotInfo{}, err
	}
	slot, err := EnsureSlot(ctx, conn, cfg)
	return info, slot, err
}

// DefaultSetupBackoff is the delay between Setup's attempts when
// SetupOptions.Backoff is nil.
const DefaultSetupBackoff = time.Second

// SetupOptions tune Setup. The zero value retries nothing, logs nothing and
// does not check pg_logical_emit_message.
type SetupOptions struct {
	// Logger gets a warning per retried attempt, the emit-message warning,
	// FailoverWarnings and one "slot ready" line. nil discards.
	Logger *slog.Logger
	// Retryable tells a passing failure (Postgres not reachable yet, in
	// recovery, out of connections) from one a human must fix; only the
	// former is retried. `walbox run` passes pipeline.IsRetryable, so that
	// one function classifies Postgres errors. nil retries nothing.
	Retryable func(error) bool
	// Backoff is the delay before retry number attempt (from 0). nil
	// waits DefaultSetupBackoff.
	Backoff func(attempt int) time.Duration
	// CheckEmitMessage runs CheckEmitMessagePrivilege before anything is
	// created; `walbox run` sets it with --message-prefix. Its
	// ErrEmitMessagePublic is returned unless AllowPublicEmitMessage, which
	// logs it as a warning instead (--message-prefix-allow-public).
	CheckEmitMessage       bool
	AllowPublicEmitMessage bool
	// ReplaySlot is the trailing slot `walbox run` keeps (--replay-window),
	// "" when it keeps none. Setup warns about every other trailing slot
	// walbox made and no longer uses (see UnusedTrailing).
	ReplaySlot string
}

// Setup connects to connString and runs Ensure with cfg, as `walbox run`
// does on start (with cfg.CreateOnFirstStart, or cfg.CreateMissing for
// --create-slot). While opts.Retryable says Postgres is only unreachable it
// tries again after opts.Backoff, until ctx ends; then it returns an error
// wrapping ctx.Err(). Any other error is returned at once. Safe for
// concurrent use; each call has its own connection.
func Setup(ctx context.Context, connString string, cfg Config, opts SetupOptions) (ServerInfo, SlotInfo, error) {
	if err := cfg.Validate(); err != nil {
		return ServerInfo{}, SlotInfo{}, err
	}
	cfg = cfg.WithDefaults()
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	for attempt := 0; ; attempt++ {
		info, slot, err := setupOnce(ctx, connString, cfg, opts, log)
		if err == nil {
			return info, slot, nil
		}
		if ctx.Err() != nil {
			return info, slot, fmt.Errorf("slotctl: setup stopped: %w", ctx.Err())
		}
		if opts.Retryable == nil || !opts.Retryable(err) {
			return info, slot, err
		}
		delay := DefaultSetupBackoff
		if opts.Backoff != nil {
			delay = opts.Backoff(attempt)
		}
		log.Warn("postgres not reachable, retrying", "err", err, "retry_in", delay.String(), "attempt", attempt+1)
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return info, slot, fmt.Errorf("slotctl: setup stopped: %w", ctx.Err())
		}
	}
}

// setupOnce is one attempt of Setup on a connection of its own.
func setupOnce(ctx context.Context, connString string, cfg Config, opts SetupOptions, log *slog.Logger) (ServerInfo, SlotInfo, error) {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return ServerInfo{}, SlotInfo{}, fmt.Errorf("slotctl: connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())

	if opts.CheckEmitMessage {
		err := CheckEmitMessagePrivilege(ctx, conn)
		switch {
		case errors.Is(err, ErrEmitMessagePublic) && opts.AllowPublicEmitMessage:
			log.Warn("starting with message routing although every database role may emit outbox messages "+
				"(--message-prefix-allow-public); apply migrations/004_emit_message_privilege.sql to close this", "err", err)
		case errors.Is(err, ErrEmitMessagePublic):
			return ServerInfo{}, SlotInfo{}, fmt.Errorf("%w\n(to start anyway, accepting that any role may forge events, pass --message-prefix-allow-public)", err)
		case err != nil:
			return ServerInfo{}, SlotInfo{}, err
		}
	}

	// Looked up first only to say in the log that a slot was created.
	_, before := Inspect(ctx, conn, cfg.Slot)
	var existing []TableRows
	if errors.Is(before, ErrSlotNotFound) && (cfg.CreateMissing || cfg.CreateOnFirstStart) {
		// Counted before the slot is created, for the warning below. A
		// failure is Ensure's to report (the table may not exist).
		existing, _ = ExistingRows(ctx, conn, cfg)
	}
	info, slot, err := Ensure(ctx, conn, cfg)
	if err != nil {
		return info, slot, err
	}
	switch {
	case !errors.Is(before, ErrSlotNotFound):
	case cfg.CreateMissing:
		// Asked for explicitly, typically after ErrSlotVanished: say again
		// what a new slot means, and that the flag should not stay set.
		log.Warn("created a new replication slot because of --create-slot; it streams only transactions committed from now on: "+
			"if a slot of this name existed before, re-publish the outbox rows committed since its last position; "+
			"remove --create-slot so that a slot that vanishes later stops walbox instead of being replaced",
			"slot", slot.Name, "publication", cfg.Publication, "lsn", slot.ConfirmedFlushLSN.String())
	default:
		log.Info("created the replication slot (first start); it streams transactions committed from now on",
			"slot", slot.Name, "publication", cfg.Publication, "lsn", slot.ConfirmedFlushLSN.String())
	}
	for _, r := range existing {
		log.Warn(r.UnsentWarning(slot.Name), "slot", slot.Name, "table", r.Table.String(), "rows", r.Rows, "more_rows", r.More)
	}
	if scope := PatroniScope(ctx, conn); scope != "" && errors.Is(before, ErrSlotNotFound) {
		log.Warn(PatroniCreatedWarning(scope, slot.Name, slot.Database), "slot", slot.Name)
	}
	warnings, err := FailoverWarnings(ctx, conn, cfg)
	if err != nil {
		log.Warn("could not check the failover configuration", "err", err)
	}
	for _, w := range warnings {
		log.Warn(w, "slot", slot.Name)
	}
	unused, err := UnusedTrailing(ctx, conn, cfg, opts.ReplaySlot)
	if err != nil {
		// Advice only: the slot is ready.
		log.Warn("could not look for trailing replay slots walbox no longer uses", "err", err)
	}
	for _, u := range unused {
		log.Warn(u.Warning(), "slot", u.Name, "trails", u.Trails, "retained_bytes", u.RetainedBytes)
	}
	log.Info("slot ready", "slot", slot.Name, "publication", cfg.Publication,
		"server_version", info.VersionNum, "confirmed_lsn", slot.ConfirmedFlushLSN.String(),
		"wal_status", slot.WALStatus)
	return info, slot, nil
}
