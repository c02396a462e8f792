package inbox

import (
	"context"
	"fmt"
	"time"
)

// DefaultCleanupBatch is the number of rows Cleanup deletes per statement
// when its batch argument is 0.
const DefaultCleanupBatch = 1000

// Cleanup deletes this consumer's inbox rows received more than olderThan
// ago, batch rows per DELETE statement (DefaultCleanupBatch when 0), oldest
// first, until none is left, and returns how many it deleted. Each batch is
// a statement of its own, so locks and WAL stay small; run it outside a
// transaction (db a connection or a pool) and on a schedule, e.g. hourly.
//
// olderThan is the retention, counted from the first applied copy
// (received_at). It must exceed the longest time after which another copy
// of an event can still arrive, late copies included (a walbox replay, a
// re-publish from the outbox table, a cut-off instance's retries, each then
// readable for the topic's retention): a copy arriving after its row was
// deleted is applied again. The package documentation gives the rule. When
// ctx ends between batches, Cleanup returns the count so far with ctx's
// error.
func (ib *Inbox) Cleanup(ctx context.Context, db Execer, olderThan time.Duration, batch int) (int64, error) {
	if olderThan <= 0 {
		return 0, fmt.Errorf("%w: cleanup retention %s must be positive, and longer than any redelivery window", ErrInvalidConfig, olderThan)
	}
	if batch < 0 {
		return 0, fmt.Errorf("%w: cleanup batch %d is negative; use 0 for %d", ErrInvalidConfig, batch, DefaultCleanupBatch)
	}
	if batch == 0 {
		batch = DefaultCleanupBatch
	}
	t := ib.table.sanitize()
	sql := `DELETE FROM ` + t + ` WHERE consumer = $1 AND (source, event_id) IN (` +
		`SELECT source, event_id FROM ` + t + ` WHERE consumer = $1 AND received_at < now() - $2 * interval '1 microsecond'` +
		` ORDER BY received_at LIMIT $3)`
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, fmt.Errorf("inbox %s: cleanup stopped after %d rows: %w", ib.table, total, err)
		}
		tag, err := db.Exec(ctx, sql, ib.cfg.Consumer, olderThan.Microseconds(), batch)
		if err != nil {
			return total, fmt.Errorf("inbox %s: cleanup of consumer %q after %d rows: %w", ib.table, ib.cfg.Consumer, total, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}
