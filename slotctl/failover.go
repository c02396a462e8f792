package slotctl

import (
	"context"
	"fmt"
	"strings"
)

// FailoverWarnings returns what weakens a failover slot on the server conn
// is connected to, when cfg asks for one (Config.Failover) on PostgreSQL
// 17+: nothing refuses to start, but a failover may erase events walbox has
// already sent. Today that is an empty synchronized_standby_slots on a
// primary: the primary then sends logical changes before its standbys have
// them, and a lagging standby promoted lacks transactions Kafka holds. nil
// when there is nothing to say, also on a standby (the setting is the
// primary's).
func FailoverWarnings(ctx context.Context, conn Querier, cfg Config) ([]string, error) {
	if !cfg.Failover {
		return nil, nil
	}
	if scope := PatroniScope(ctx, conn); scope != "" {
		var failover bool
		err := conn.QueryRow(ctx, `SELECT COALESCE((SELECT to_jsonb(s)->>'failover' = 'true' FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1), true)`, cfg.Slot).Scan(&failover)
		if err != nil {
			return nil, fmt.Errorf("slotctl: read slot %q: %w", cfg.Slot, err)
		}
		if !failover {
			return []string{patroniFailoverWarning(scope, cfg.Slot)}, nil
		}
	}
	var (
		version    int
		inRecovery bool
		standbys   *string
	)
	err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int, pg_is_in_recovery(),
       current_setting('synchronized_standby_slots', true)`).Scan(&version, &inRecovery, &standbys)
	if err != nil {
		return nil, fmt.Errorf("slotctl: read synchronized_standby_slots: %w", err)
	}
	if !FeaturesFor(version).FailoverSlots || inRecovery || standbys == nil || strings.TrimSpace(*standbys) != "" {
		return nil, nil
	}
	return []string{"synchronized_standby_slots is empty on the primary: the failover slot reaches a standby, but the primary sends walbox " +
		"transactions its standbys may not have yet; if a lagging standby is promoted, Kafka holds events of transactions the new primary " +
		"does not have (walbox then logs an ERROR and counts them in walbox_failover_erased_events_total). " +
		"Set synchronized_standby_slots to the standbys' physical slots (primary_slot_name), e.g. ALTER SYSTEM SET synchronized_standby_slots = '<slot>'; SELECT pg_reload_conf()"}, nil
}
