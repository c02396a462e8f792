package snapshot_test

import (
	"testing"
	"time"

	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
)

// TestSnapshotWhereComment: --snapshot-where may end in a "-- comment",
// as replay's --where may; it used to swallow the closing parenthesis
// (a syntax error). A condition that smuggles in a second statement is
// refused by the server, which the extended protocol guarantees for
// every statement the takeover sends with it (issue 17, item 9).
func TestSnapshotWhereComment(t *testing.T) {
	e := newStateEnv(t)
	take := func(where string) (snapshot.Result, *capture, error) {
		c := &capture{}
		res, err := snapshot.Takeover(e.ctx, snapshot.Options{
			ConnString: e.dsn,
			Slotctl:    slotctl.Config{CreateOnFirstStart: true},
			Snapshot:   snapshot.Config{Mode: snapshot.ModePending, Where: where, Order: []string{"id"}, BatchRows: 7},
			Router:     e.rt, Producer: c, SlotBusyTimeout: 10 * time.Second,
		})
		return res, c, err
	}
	_, _, err := take("sent_at IS NULL); CREATE TABLE injected (x int); SELECT 1 WHERE (true")
	if err == nil {
		t.Fatal("a --snapshot-where with a second statement was accepted")
	}
	var n int
	if err := e.conn.QueryRow(e.ctx, `SELECT count(*) FROM pg_class WHERE relname = 'injected'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the second statement ran (%d, %v)", n, err)
	}
	res, c, err := take("sent_at IS NULL -- what the old relay has not sent")
	if err != nil || !res.Taken || len(c.records()) != 20 {
		t.Fatalf("takeover with a trailing comment: %+v, %v, %d records; want the 20 pending rows", res, err, len(c.records()))
	}
}
