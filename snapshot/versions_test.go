package snapshot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
)

// TestTakeoverFailoverSlot: --snapshot with --failover-slot creates a
// failover slot with an exported snapshot on PostgreSQL 17+; on older
// servers it refuses before creating anything or marking the publication,
// naming the version and the fix, as a start without --snapshot does.
func TestTakeoverFailoverSlot(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		e := newStateEnv(t, pgtest.WithBinDir(v.BinDir))
		c := &capture{}
		res, err := snapshot.Takeover(e.ctx, snapshot.Options{
			ConnString: e.dsn,
			Slotctl:    slotctl.Config{CreateOnFirstStart: true, Failover: true},
			Snapshot:   snapshot.Config{Mode: snapshot.ModePending, Where: "sent_at IS NULL", Order: []string{"id"}},
			Router:     e.rt, Producer: c, SlotBusyTimeout: 10 * time.Second,
		})
		var slots int
		if err := e.conn.QueryRow(e.ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots); err != nil {
			t.Fatal(err)
		}
		if v.Major < 17 {
			if !errors.Is(err, slotctl.ErrUnsupportedVersion) || !strings.Contains(err.Error(), "--failover-slot") {
				t.Fatalf("takeover with a failover slot on PostgreSQL %d: %v, want ErrUnsupportedVersion naming --failover-slot", v.Major, err)
			}
			if slots != 0 || len(c.records()) != 0 {
				t.Fatalf("refused takeover left %d slots and produced %d records", slots, len(c.records()))
			}
			var marked bool
			if err := e.conn.QueryRow(e.ctx, `SELECT EXISTS (SELECT FROM pg_publication
				WHERE obj_description(oid, 'pg_publication') LIKE $1 || '%')`, snapshot.SnapshotMarker("walbox")).Scan(&marked); err != nil {
				t.Fatal(err)
			}
			if marked {
				t.Fatal("refused takeover marked the publication as a snapshot in progress")
			}
			return
		}
		if err != nil {
			t.Fatalf("takeover with a failover slot: %v", err)
		}
		if !res.Taken || res.Stats.Produced != 20 || !res.Slot.Failover {
			t.Fatalf("takeover %+v, want a snapshot of 20 rows on a failover slot", res)
		}
		if got := e.comment(); !strings.HasPrefix(got, "walbox: slot walbox snapshot finished at ") {
			t.Fatalf("publication comment %q after the snapshot finished, want the finished marker", got)
		}
	})
}
