package pipeline

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
)

// TestXactEndedNewerThanSnapshotXmax: the transaction X a fallback is for
// may have an xid at or above the xmax of a new snapshot (xmax is the latest
// completed xid + 1, not the next xid): an older transaction still open and
// none newer completed. It failed when the 64-bit xid was taken as the one
// below xmax: epoch 0 gave a negative xid8 (an error, so the fallback ran
// blind for 5 minutes), a later epoch the previous epoch's xid ("forgotten",
// so X passed for ended while it ran).
func TestXactEndedNewerThanSnapshotXmax(t *testing.T) {
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
