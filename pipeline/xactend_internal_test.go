package pipeline

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
)

// TestXactEndedNewerThanSnapshotXmax: the transaction X a fallback is for
// may have an xid at or above the xmax of a new snapshot (xmax is the latest
// completed xid + 1, not the next xid): an older transaction still open and
// none newer completed. It failed when the 64-bit xid was taken as the one
// below xmax: epoch 0 gave a negative xid8 (an error, so the fallback ran
// blind for 5 minutes), a later epoch the previous epoch's xid ("forgotten",
// so X passed for ended while it ran).
func TestXactEndedNewerThanSnapshotXmax(t *testing.T) {
	parallel(t)
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var xids [2]uint32
	for i := range xids {
		c, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		tx, err := c.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		var x int64
		if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&x); err != nil {
			t.Fatal(err)
		}
		xids[i] = uint32(x)
	}
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	var xmax int64
	c, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if err := c.QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax); err != nil {
		t.Fatal(err)
	}
	if uint32(xmax) > xids[1] {
		t.Fatalf("snapshot xmax %d above X %d: the case is not set up", xmax, xids[1])
	}
	lsn, err := xactEnded(ctx, &conn, srv.DSN("postgres"), xids[1])
	if err != nil || lsn != 0 {
		t.Fatalf("xactEnded(X %d, open; xmax %d) = %s, %v; want 0 (in progress), no error", xids[1], xmax, lsn, err)
	}
}

// TestFullXID: the 64-bit xid of a 32-bit one is the nearest to the
// snapshot's xmax, across epochs.
func TestFullXID(t *testing.T) {
	const e = 1 << 32
	for _, tc := range []struct {
		xmax uint64
		xid  uint32
		want uint64
	}{
		{1000, 900, 900},
		{1000, 1000, 1000},              // X open, nothing newer done
		{1000, 1005, 1005},              // X newer than xmax
		{e + 5, 4294967290, 4294967290}, // X of the previous epoch
		{e + 5, 7, e + 7},               // X newer than xmax, epoch 1
		{3*e - 10, 20, 3*e + 20},        // X of the next epoch than xmax
		{5*e + 100, 4294967200, 4*e + 4294967200},
	} {
		if got := fullXID(tc.xmax, tc.xid); got != tc.want {
			t.Errorf("fullXID(%d, %d) = %d, want %d", tc.xmax, tc.xid, got, tc.want)
		}
	}
}

// TestXactEndedLeastPrivilegeOnAStandby: the fallback's status reads work
// for the role migrations/ creates, on the primary and on a standby
// (decoding from a standby, PostgreSQL 16+): X in progress, then ended once
// its rollback is replayed. It failed on the standby: a standby advances
// its next xid past X only at the commit or abort of X or of a newer
// transaction, so pg_xact_status said "transaction ID 730 is in the future"
// for as long as X ran, and the fallback ran blind (5 minutes, then
// streaming again while X was still open, to fall back once more).
func TestXactEndedLeastPrivilegeOnAStandby(t *testing.T) {
	fulltest.Require(t, "a standby; the short run reads the status on the primary")
	primary := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"001_outbox.sql", "002_publication.sql", "003_walbox_role.sql", "004_emit_message_privilege.sql", "005_heartbeat_function.sql"} {
		sql, err := migrations.FS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	if _, err := conn.Exec(ctx, `CREATE TABLE xactend_t (i int)`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	standby := pgtest.Standby(t, primary, pgtest.StandbyOptions{})
	if conn, err = pgx.Connect(ctx, primary.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	var x int64
	if _, err := tx.Exec(ctx, `INSERT INTO xactend_t VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	if err := tx.QueryRow(ctx, `SELECT pg_current_xact_id()::text::bigint`).Scan(&x); err != nil {
		t.Fatal(err)
	}
	servers := map[string]*pgtest.Server{"primary": primary, "standby": standby}
	conns := map[string]*pgx.Conn{}
	defer func() {
		for _, c := range conns {
			if c != nil {
				c.Close(context.Background())
			}
		}
	}()
	ask := func(name string) (pglogrepl.LSN, error) {
		c := conns[name]
		defer func() { conns[name] = c }()
		return xactEnded(ctx, &c, fmt.Sprintf("postgres://walbox@127.0.0.1:%d/postgres", servers[name].Port()), uint32(x))
	}
	// The standby knows X once it replayed X's first record, as it has
	// when walbox decodes X from it.
	var primaryPos pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&primaryPos); err != nil {
		t.Fatal(err)
	}
	sconn, err := pgx.Connect(ctx, standby.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close(context.Background())
	for deadline := time.Now().Add(time.Minute); ; {
		var replayed pglogrepl.LSN
		if err := sconn.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn()`).Scan(&replayed); err != nil {
			t.Fatal(err)
		}
		if replayed >= primaryPos {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the standby replayed %s, not %s, within a minute", replayed, primaryPos)
		}
		time.Sleep(20 * time.Millisecond) // polling, with a deadline
	}
	for name := range servers {
		if lsn, err := ask(name); err != nil || lsn != 0 {
			t.Fatalf("%s: X %d open: %s, %v; want 0, no error", name, x, lsn, err)
		}
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for name := range servers {
		deadline := time.Now().Add(time.Minute)
		for {
			lsn, err := ask(name)
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			if lsn != 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: X %d still in progress a minute after its rollback", name, x)
			}
			time.Sleep(20 * time.Millisecond) // polling, with a deadline
		}
	}
}
