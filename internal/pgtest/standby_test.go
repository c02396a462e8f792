package pgtest_test

import (
	"context"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/pgtest"
)

// TestStandbyStreamsAndPromotes checks the primary/standby pair the failover
// tests build on: the standby replays what the primary commits and, once
// promoted, accepts writes on a new timeline.
func TestStandbyStreamsAndPromotes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary := pgtest.Start(t)
	standby := pgtest.Standby(t, primary, pgtest.StandbyOptions{})

	pc := connect(t, primary.DSN("postgres"))
	if _, err := pc.Exec(ctx, `CREATE TABLE t(v int); INSERT INTO t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	sc := connect(t, standby.DSN("postgres"))
	var inRecovery bool
	if err := sc.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&inRecovery); err != nil || !inRecovery {
		t.Fatalf("standby in recovery = %v, %v; want true", inRecovery, err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int
		err := sc.QueryRow(ctx, `SELECT count(*) FROM t`).Scan(&n)
		if err == nil && n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby never replayed the primary's row (last: %d, %v)\n%s", n, err, standby.LogTail(20))
		}
		time.Sleep(50 * time.Millisecond)
	}

	if err := primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	sc = connect(t, standby.DSN("postgres"))
	if _, err := sc.Exec(ctx, `INSERT INTO t VALUES (2)`); err != nil {
		t.Fatalf("write on the promoted standby: %v", err)
	}
	var tli int
	if err := sc.QueryRow(ctx, `SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int`).Scan(&tli); err != nil {
		t.Fatal(err)
	}
	if tli != 2 {
		t.Errorf("timeline after promotion = %d, want 2", tli)
	}
}
