package slotctl_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

// TestPatroniScopeNeedsPatronisCommandLine: a server started with
// cluster_name on its command line alone (postgres -c cluster_name=...,
// pg_ctl -o, a container's command) is not run by Patroni, and walbox
// creates its slot there; one started with the settings Patroni always
// puts on the command line is recognised.
//
// How it broke: cluster_name on the command line alone made walbox and
// slotctl refuse to create the slot ("run by Patroni"), and the error
// named only Patroni's slots: as the way out.
func TestPatroniScopeNeedsPatronisCommandLine(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cmdLine map[string]string
		scope   string
	}{
		{name: "cluster_name only", cmdLine: map[string]string{"cluster_name": "app"}},
		{name: "as Patroni starts it", cmdLine: map[string]string{
			"cluster_name": "demo", "max_locks_per_transaction": "64", "max_prepared_transactions": "0",
			"wal_log_hints": "on", "track_commit_timestamp": "off", "hot_standby": "on",
		}, scope: "demo"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			srv := pgtest.Start(t, func(o *pgtest.Options) { o.CommandLine = tt.cmdLine })
			conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			if _, err := conn.Exec(ctx, `CREATE TABLE outbox (id uuid PRIMARY KEY, aggregatetype text, aggregateid text, type text, payload jsonb)`); err != nil {
				t.Fatal(err)
			}
			if got := slotctl.PatroniScope(ctx, conn); got != tt.scope {
				t.Fatalf("PatroniScope = %q, want %q", got, tt.scope)
			}
			cfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
			if err := slotctl.EnsurePublication(ctx, conn, cfg); err != nil {
				t.Fatal(err)
			}
			_, err = slotctl.EnsureSlot(ctx, conn, cfg)
			if tt.scope == "" && err != nil {
				t.Fatalf("EnsureSlot on a server with only cluster_name on its command line: %v", err)
			}
			if tt.scope != "" && (err == nil || !strings.Contains(err.Error(), "pg_create_logical_replication_slot('walbox', 'pgoutput')")) {
				t.Fatalf("EnsureSlot on a server started as Patroni starts it: %v, want a refusal that names how to create the slot anyway", err)
			}
		})
	}
}
