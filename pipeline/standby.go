package pipeline

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Standby reports whether the relay is waiting, as a standby, for a slot
// another process holds (Config.Standby). Safe for concurrent use.
func (r *Relay) Standby() bool { return r.standby.Load() }

// enterStandby marks the relay as standby after START_REPLICATION found the
// slot busy; it logs once per period of standing by, not per retry.
func (r *Relay) enterStandby(err error) {
	// A standby may wait for hours: what the lost session spooled (up to
	// --spool-max-bytes) would only be sent again from its start by the
	// next session, so it goes now, with the subdirectory and its lock.
	r.spool.close()
	if r.standby.Swap(true) {
		return
	}
	r.metrics.standby.Set(1)
	r.log.Info("standby: the slot is in use by another process; waiting for it",
		"slot", r.cfg.Slot, "retry_every", r.cfg.StandbyRetry.String(), "err", err)
}

// leaveStandby is called once a session streams: a standby has taken over.
func (r *Relay) leaveStandby() {
	if !r.standby.Swap(false) {
		return
	}
	r.metrics.standby.Set(0)
	r.log.Info("standby: took over the slot", "slot", r.cfg.Slot)
}

// slotHeldElsewhere reports whether the slot is active, asked over an
// ordinary connection. A standby retrying every StandbyRetry asks this
// first and opens a walsender only when the slot looks free: each refused
// START_REPLICATION takes a walsender and writes an ERROR and its statement
// to the server log (two lines a second, every second, for as long as the
// other instance runs). An error means "unknown": the caller then tries
// START_REPLICATION, which decides.
func slotHeldElsewhere(ctx context.Context, connString, slot string) (bool, error) {
	cfg, err := pgx.ParseConfig(connString)
	if err != nil {
		return false, err
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "walbox"
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var active bool
	if err := conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&active); err != nil {
		return false, fmt.Errorf("read whether slot %q is active: %w", slot, err)
	}
	return active, nil
}

// standByAfterFence decides what a fenced exactly-once relay does: with
// Config.Standby it stands by, as a standby that lost the slot does,
// instead of stopping (it returns true after clearing the failure); a
// relay without Standby, or without NewTxnProducer to replace its fenced
// client, stops as before. Fencing means another instance loaded the
// producer id of the transactional id: usually the slot's new holder,
// after this one was cut off. The slot decides who streams; the standby
// checks it every StandbyRetry and, once it is free, takes it back with a
// new client whose producer id load fences the other in turn. Nothing is
// confirmed while fenced (eosState.fenced), and the next session starts
// from what Kafka committed.
func (r *Relay) standByAfterFence(ferr error) bool {
	if !r.cfg.Standby || r.cfg.NewTxnProducer == nil || !errors.Is(ferr, ErrFenced) {
		return false
	}
	id, ok := r.delivery.unfence(r.fails.clear)
	if !ok {
		return false
	}
	r.log.Warn("exactly-once: another instance took over the transactional id (fenced); standing by until the slot is free, then taking it back",
		"slot", r.cfg.Slot, "transactional_id", id, "err", ferr)
	return true
}
