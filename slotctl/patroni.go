package slotctl

import (
	"context"
	"fmt"
)

// PatroniScope returns the scope of the Patroni cluster that runs the
// server conn is connected to, or "" when it does not look run by Patroni.
// Patroni starts PostgreSQL with cluster_name set to its scope on the
// command line, together with the other settings it always passes there
// (its CMDLINE_OPTIONS, Patroni 4.1: max_locks_per_transaction,
// max_prepared_transactions and wal_log_hints among them); that is the sign
// read here (pg_settings.source = 'command line'). cluster_name alone is
// not: a server started with postgres -c cluster_name=..., pg_ctl -o or a
// container's command has it there too.
func PatroniScope(ctx context.Context, conn Querier) string {
	var scope string
	err := conn.QueryRow(ctx, `SELECT COALESCE((SELECT setting FROM pg_catalog.pg_settings
		WHERE name = 'cluster_name' AND source = 'command line'
		AND (SELECT count(*) FROM pg_catalog.pg_settings
			WHERE name IN ('max_locks_per_transaction', 'max_prepared_transactions', 'wal_log_hints')
			AND source = 'command line') = 3), '')`).Scan(&scope)
	if err != nil {
		return ""
	}
	return scope
}

// patroniCreateError refuses to create r's slot on a server Patroni runs
// (scope): Patroni drops every slot that is not in its slots:
// configuration (nor a failover slot, nor in ignore_slots) within a
// loop_wait, and keeps on its replicas only those of slots:.
func patroniCreateError(scope string, r resolved, notFound error) error {
	return fmt.Errorf("%w; the server is run by Patroni (cluster %q, cluster_name on its command line), which drops a slot that is not in its slots: configuration "+
		"within a loop_wait and keeps on its replicas only those that are, so walbox does not create it: declare it as a permanent slot "+
		"(patronictl edit-config, then slots: {%s: {type: logical, database: <the outbox's database>, plugin: %s}}), let Patroni create it, "+
		"and start walbox again (without --create-slot); see docs/patroni.md. "+
		"If Patroni does not run this server (it was recognised by cluster_name, max_locks_per_transaction, max_prepared_transactions and wal_log_hints on the postmaster's command line), "+
		"create the slot yourself: SELECT pg_create_logical_replication_slot(%s, %s)",
		notFound, scope, r.slot, Plugin, quoteLiteral(r.slot), quoteLiteral(Plugin))
}

// PatroniCreatedWarning is what to say after walbox or slotctl created
// slot as a failover slot on a server Patroni runs (scope): Patroni 4.1
// leaves failover slots to PostgreSQL's slot synchronization.
func PatroniCreatedWarning(scope, slot, database string) string {
	return fmt.Sprintf("created failover slot %q on a server run by Patroni (cluster %q): Patroni 4.1 neither drops nor keeps failover slots; "+
		"its replicas have it only if PostgreSQL synchronizes it (sync_replication_slots = on in Patroni's postgresql.parameters). "+
		"The alternative is a permanent slot of Patroni's slots: {%s: {type: logical, database: %s, plugin: %s}} without --failover-slot (docs/patroni.md)",
		slot, scope, slot, database, Plugin)
}

// patroniFailoverWarning is FailoverWarnings' line for --failover-slot on
// a Patroni-run server whose slot is not a failover slot: accepted, since
// Patroni keeps its permanent slots on its replicas itself.
func patroniFailoverWarning(scope, slot string) string {
	return fmt.Sprintf("--failover-slot is set, but slot %q is not a failover slot and the server is run by Patroni (cluster %q): walbox uses the slot as it is, "+
		"since Patroni keeps the permanent slots of its slots: configuration on its replicas itself. "+
		"Do not turn failover on for it (ALTER_REPLICATION_SLOT ... (FAILOVER true)): Patroni 4.1 leaves failover slots to PostgreSQL's slot synchronization and stops keeping it. "+
		"Make sure %q is in Patroni's slots: (patronictl show-config), or a failover loses it; --failover-slot can then be turned off (docs/patroni.md)",
		slot, scope, slot)
}
