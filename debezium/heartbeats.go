package debezium

import (
	"context"
	"fmt"

	"github.com/walbox/walbox/heartbeat"
	"github.com/walbox/walbox/slotctl"
)

// HeartbeatPrefixExclude is the setting that keeps walbox's heartbeats out
// of another Debezium connector's records.
const HeartbeatPrefixExclude = "message.prefix.exclude.list=" + heartbeat.Prefix

// OtherLogicalSlots returns the logical replication slots of the current
// database other than slot, by name. walbox's heartbeats are logical
// decoding messages, which Postgres decodes for every logical slot of the
// database whatever its publication; a Debezium connector streaming one of
// them emits each as a record to its <topic.prefix>.message topic unless
// its message.prefix.include.list or message.prefix.exclude.list leaves
// the heartbeat prefix out (by default it passes all prefixes). During a
// partial migration, those slots are the other connectors.
func OtherLogicalSlots(ctx context.Context, conn slotctl.Querier, slot string) ([]string, error) {
	rows, err := conn.Query(ctx, `SELECT slot_name::text FROM pg_catalog.pg_replication_slots
		WHERE slot_type = 'logical' AND database = current_database() AND slot_name <> $1 ORDER BY slot_name`, slot)
	if err != nil {
		return nil, fmt.Errorf("debezium: list the database's other logical slots: %w", err)
	}
	defer rows.Close()
	var names []string
	for rows.Next() {
		var n string
		if err := rows.Scan(&n); err != nil {
			return nil, fmt.Errorf("debezium: list the database's other logical slots: %w", err)
		}
		names = append(names, n)
	}
	return names, rows.Err()
}
