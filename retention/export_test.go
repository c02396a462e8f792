package retention

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
)

// StepOn runs one round of the keeper on conn, as Run does at each tick
// (creating the trailing slot first if needed), so that tests drive the
// keeper with a fake clock instead of its timer.
func (k *Keeper) StepOn(ctx context.Context, conn *pgx.Conn) error {
	ensured := k.announced
	return k.attempt(ctx, &conn, &ensured)
}

// Interval is the keeper's advance interval, after the defaults.
func (k *Keeper) Interval() time.Duration { return k.cfg.Interval }
