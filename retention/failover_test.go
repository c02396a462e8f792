package retention_test

import (
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/slotctl"
)

// TestTrailingSlotIsAFailoverSlotWhenTheLiveOneIs: the replay window must
// survive a failover as the live slot does. pg_copy_logical_replication_slot
// never copies the failover property, so the trailing slot used to be lost
// with the old primary; the keeper now turns it on, for a new trailing slot
// and for one an older walbox made.
func TestTrailingSlotIsAFailoverSlotWhenTheLiveOneIs(t *testing.T) {
	installed, err := pgtest.InstalledVersions()
	if err != nil || len(installed) == 0 || installed[len(installed)-1].Major < 17 {
		t.Skipf("failover slots need PostgreSQL 17 or newer (installed: %v, %v)", installed, err)
	}
	srv := pgtest.Start(t, pgtest.WithBinDir(installed[len(installed)-1].BinDir))
	e := newEnvOn(t, srv)
	// Make the live slot a failover slot.
	e.exec(t, `SELECT pg_drop_replication_slot('`+e.live+`')`)
	e.exec(t, `SELECT pg_create_logical_replication_slot('`+e.live+`', 'pgoutput', false, false, true)`)
	cfg := retention.Config{Slot: e.live, Window: time.Hour}
	confirmed := func() pglogrepl.LSN { return e.confirmed(t, e.live) }

	failover := func() bool {
		t.Helper()
		s, err := slotctl.Inspect(ctxT(t), e.conn, e.tr)
		if err != nil {
			t.Fatal(err)
		}
		return s.Failover
	}
	if err := newKeeperOn(t, e, cfg, confirmed).StepOn(ctxT(t), e.conn); err != nil {
		t.Fatal(err)
	}
	if !failover() {
		t.Fatal("a new trailing slot of a failover slot is not a failover slot")
	}

	// One made by an older walbox: a plain copy.
	e.exec(t, `SELECT pg_drop_replication_slot('`+e.tr+`')`)
	e.exec(t, `SELECT pg_copy_logical_replication_slot('`+e.live+`', '`+e.tr+`')`)
	if failover() {
		t.Fatal("pg_copy_logical_replication_slot copied the failover property; the keeper's step is not needed")
	}
	if err := newKeeperOn(t, e, cfg, confirmed).StepOn(ctxT(t), e.conn); err != nil {
		t.Fatal(err)
	}
	if !failover() {
		t.Fatal("an existing plain trailing slot of a failover slot was not made a failover slot")
	}
}
