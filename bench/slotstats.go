package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// SlotStats is a slot's row of pg_stat_replication_slots: what the server's
// logical decoding did for it since the last reset. Spill is the walsender
// writing a transaction that exceeds logical_decoding_work_mem to
// pg_replslot/ on the server's disk (protocol 1 keeps every transaction
// until its COMMIT); stream is sending an in-progress transaction to the
// client instead (protocol 2+, streaming on). A relay that spills costs the
// primary disk and delays every transaction that commits after the spilled
// one while the server reads it back.
type SlotStats struct {
	SpillTxns   int64 `json:"spill_txns"`
	SpillCount  int64 `json:"spill_count"`
	SpillBytes  int64 `json:"spill_bytes"`
	StreamTxns  int64 `json:"stream_txns"`
	StreamCount int64 `json:"stream_count"`
	StreamBytes int64 `json:"stream_bytes"`
	// TotalTxns and TotalBytes are what decoding sent to the output plugin,
	// spilled or not (PostgreSQL 14+).
	TotalTxns  int64 `json:"total_txns"`
	TotalBytes int64 `json:"total_bytes"`
	// SettledAfterMs is how long the reads took to stop changing (the view
	// is updated asynchronously on PostgreSQL 14, through the statistics
	// collector).
	SettledAfterMs float64 `json:"settled_after_ms"`
	// Unsettled is true when the figures still changed at the deadline:
	// they are then a lower bound.
	Unsettled bool `json:"unsettled,omitempty"`
}

// counters is s without the reading's metadata, for comparing reads.
func (s SlotStats) counters() [8]int64 {
	return [8]int64{s.SpillTxns, s.SpillCount, s.SpillBytes, s.StreamTxns, s.StreamCount, s.StreamBytes, s.TotalTxns, s.TotalBytes}
}

const slotStatsSQL = `
SELECT spill_txns, spill_count, spill_bytes, stream_txns, stream_count, stream_bytes,
       COALESCE(total_txns, 0), COALESCE(total_bytes, 0)
  FROM pg_stat_replication_slots WHERE slot_name = $1`

// errNoSlotStats is readSlotStats finding no row: the slot does not exist.
var errNoSlotStats = errors.New("no row in pg_stat_replication_slots")

func readSlotStats(ctx context.Context, conn *pgx.Conn, slot string) (SlotStats, error) {
	var s SlotStats
	err := conn.QueryRow(ctx, slotStatsSQL, slot).Scan(&s.SpillTxns, &s.SpillCount, &s.SpillBytes,
		&s.StreamTxns, &s.StreamCount, &s.StreamBytes, &s.TotalTxns, &s.TotalBytes)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("slot %s: %w", slot, errNoSlotStats)
	}
	if err != nil {
		return s, fmt.Errorf("read pg_stat_replication_slots of slot %s: %w", slot, err)
	}
	return s, nil
}

// Settling: the figures count once they have not changed for slotStatsStable,
// read every slotStatsPoll, within slotStatsDeadline. PostgreSQL 15+ update
// the view in shared memory as the walsender decodes; 14 sends the counters
// to the statistics collector, which a reader sees up to ~0.5 s later.
const (
	slotStatsPoll     = 250 * time.Millisecond
	slotStatsStable   = 1500 * time.Millisecond
	slotStatsDeadline = 20 * time.Second
)

// settleSlotStats reads until the counters stop changing for stable, or
// deadline passes (then the last read is returned, marked Unsettled).
func settleSlotStats(ctx context.Context, read func() (SlotStats, error), poll, stable, deadline time.Duration) (SlotStats, error) {
	start := time.Now()
	last, err := read()
	if err != nil {
		return last, err
	}
	since := time.Now()
	for {
		if time.Since(since) >= stable {
			last.SettledAfterMs = float64(since.Sub(start)) / float64(time.Millisecond)
			return last, nil
		}
		if time.Since(start) >= deadline {
			last.Unsettled = true
			last.SettledAfterMs = float64(time.Since(start)) / float64(time.Millisecond)
			return last, nil
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			return last, ctx.Err()
		case <-t.C:
		}
		s, err := read()
		if err != nil {
			return last, err
		}
		if s.counters() != last.counters() {
			since = time.Now()
		}
		last = s
	}
}

// SlotStats returns slot's settled figures.
func (e *Env) SlotStats(ctx context.Context, slot string) (SlotStats, error) {
	conn, err := e.Connect(ctx)
	if err != nil {
		return SlotStats{}, err
	}
	defer conn.Close(context.Background())
	return settleSlotStats(ctx, func() (SlotStats, error) { return readSlotStats(ctx, conn, slot) },
		slotStatsPoll, slotStatsStable, slotStatsDeadline)
}

// ResetSlotStats zeroes slot's figures with pg_stat_reset_replication_slot
// and waits until the view shows the reset (stats_reset moves; on
// PostgreSQL 14 the reset travels to the collector asynchronously, and a
// late reset would erase what the scenario measures). A slot that does not
// exist is an error.
func (e *Env) ResetSlotStats(ctx context.Context, slot string) error {
	conn, err := e.Connect(ctx)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	resetAt := func() (time.Time, error) {
		var at *time.Time
		err := conn.QueryRow(ctx, `SELECT stats_reset FROM pg_stat_replication_slots WHERE slot_name = $1`, slot).Scan(&at)
		if errors.Is(err, pgx.ErrNoRows) {
			return time.Time{}, fmt.Errorf("reset statistics of slot %s: %w", slot, errNoSlotStats)
		}
		if err != nil || at == nil {
			return time.Time{}, err
		}
		return *at, nil
	}
	before, err := resetAt()
	if err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, `SELECT pg_stat_reset_replication_slot($1)`, slot); err != nil {
		return fmt.Errorf("pg_stat_reset_replication_slot(%s): %w", slot, err)
	}
	deadline := time.Now().Add(slotStatsDeadline)
	for {
		at, err := resetAt()
		if err != nil {
			return err
		}
		if at.After(before) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("reset statistics of slot %s: stats_reset still %s after %s", slot, before, slotStatsDeadline)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// slotExists reports whether slot is in pg_replication_slots.
func (e *Env) slotExists(ctx context.Context, slot string) (bool, error) {
	conn, err := e.Connect(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var ok bool
	err = conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)`, slot).Scan(&ok)
	return ok, err
}
