package patronitest_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/patronitest"
)

// TestClusterKeepsItsPermanentSlot: a two-member cluster bootstraps, the
// permanent logical slot exists on the leader and reaches the replica
// (Patroni copies it), and a switchover hands the leadership over.
func TestClusterKeepsItsPermanentSlot(t *testing.T) {
	fulltest.Require(t, "a real Patroni cluster; e2e's TestPatroni runs walbox on one")
	for _, v := range patronitest.RequireVersions(t, 15, 17) {
		t.Run(v.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			c := patronitest.Start(t, patronitest.Options{Version: v,
				Slots: map[string]patronitest.Slot{"walbox": {Type: "logical", Database: "postgres", Plugin: "pgoutput"}}})
			leader, err := c.WaitLeader(ctx, nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range c.Members {
				waitSlot(ctx, t, m, "walbox")
			}
			other := c.Members[0]
			if other == leader {
				other = c.Members[1]
			}
			if err := c.Switchover(ctx, leader, other); err != nil {
				t.Fatal(err)
			}
			conn, err := pgx.Connect(ctx, c.MultiHostDSN("postgres"))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(ctx)
			var port int
			if err := conn.QueryRow(ctx, `SELECT current_setting('port')::int`).Scan(&port); err != nil {
				t.Fatal(err)
			}
			if port != other.PGPort {
				t.Fatalf("the multi-host DSN reached port %d, want the new leader's %d", port, other.PGPort)
			}
		})
	}
}

func waitSlot(ctx context.Context, t *testing.T, m *patronitest.Member, slot string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := pgx.Connect(ctx, m.DSN("postgres"))
		if err == nil {
			var n int
			err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1 AND slot_type = 'logical'`, slot).Scan(&n)
			conn.Close(ctx)
			if err == nil && n == 1 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %s not on %s within 2 minutes (last error %v)", slot, m.Name, err)
		}
		time.Sleep(200 * time.Millisecond) // polling interval
	}
}
