package retention

import "fmt"

// LostAdvice says why the server invalidated the trailing slot and how to
// keep the next one, from pg_replication_slots.invalidation_reason
// (PostgreSQL 17+; empty before, where losing its WAL is the only way a
// slot on a primary is invalidated). It ends without a period, so callers
// can put it into their error message.
func LostAdvice(reason string) string {
	switch reason {
	case "", "wal_removed":
		return "the server removed WAL it still needed because max_slot_wal_keep_size is smaller than the WAL of the window; " +
			"raise max_slot_wal_keep_size or lower --replay-window"
	case "idle_timeout":
		// PostgreSQL 18: the trailing slot is never streamed; it is
		// inactive between the keeper's advances, while the live slot does
		// not move, and all the while walbox is stopped.
		return "it stayed inactive longer than idle_replication_slot_timeout (PostgreSQL 18+); the trailing slot is inactive " +
			"except when walbox advances it, which it does not while the outbox is quiet or walbox is stopped, " +
			"so set idle_replication_slot_timeout = 0 (the default) or longer than walbox may be stopped plus --replay-window"
	default:
		return fmt.Sprintf("the server invalidated it with reason %q (see invalidation_reason in the PostgreSQL documentation of pg_replication_slots)", reason)
	}
}
