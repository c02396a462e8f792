package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/pgtest"
)

// TestServersHaveTheirOwnSystemIdentifier: servers are copies of one
// template cluster, yet each has a system identifier of its own (walbox
// refuses a state recorded on another cluster by it), pg_control and the WAL
// agree on it through a crash and a restart, and a copy's changes stay in
// that copy. On every version ForEachVersion selects.
func TestServersHaveTheirOwnSystemIdentifier(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		sysID := func(s *pgtest.Server) (id string) {
			t.Helper()
			if err := connect(t, s.DSN("postgres")).QueryRow(ctx, "SELECT system_identifier::text FROM pg_control_system()").Scan(&id); err != nil {
				t.Fatal(err)
			}
			return id
		}
		a := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
		b := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
		idA, idB := sysID(a), sysID(b)
		if idA == idB {
			t.Fatalf("two servers share system identifier %s", idA)
		}
		mustExec(t, connect(t, a.DSN("postgres")), "CREATE TABLE only_in_a (n int); INSERT INTO only_in_a VALUES (1)")
		if err := a.StopImmediate(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Restart(ctx); err != nil { // crash recovery reads the WAL, whose headers name the system
			t.Fatalf("restart after a crash: %v\n%s", err, a.LogTail(20))
		}
		if got := sysID(a); got != idA {
			t.Errorf("system identifier after the restart %s, want %s", got, idA)
		}
		var n int
		if err := connect(t, a.DSN("postgres")).QueryRow(ctx, "SELECT n FROM only_in_a").Scan(&n); err != nil || n != 1 {
			t.Errorf("only_in_a after crash recovery: %d, %v", n, err)
		}
		var exists bool
		if err := connect(t, b.DSN("postgres")).QueryRow(ctx, "SELECT to_regclass('only_in_a') IS NOT NULL").Scan(&exists); err != nil || exists {
			t.Errorf("only_in_a exists in the other server: %v, %v", exists, err)
		}
		if c := pgtest.Start(t, pgtest.WithBinDir(v.BinDir)); sysID(c) == idA || sysID(c) == idB {
			t.Errorf("a third server repeats a system identifier")
		}
	})
}
