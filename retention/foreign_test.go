package retention_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/retention"
)

// TestForeignTrailing: a pgoutput slot of the
// trailing slot's name that walbox did not make is refused, not adopted
// and advanced (which skips its consumer's events). walbox made it only
// if it was never decoded to a client (walbox moves its trailing slot
// with pg_replication_slot_advance, and walbox replay reads a temporary
// copy) and it is not ahead of the live slot (it started as a copy of it
// and is never moved past it). It used to be adopted (issue 17, item 4).
func TestForeignTrailing(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		srv := sharedFor(t, v)
		t.Run("decoded", func(t *testing.T) {
			e := newEnvOn(t, srv)
			e.exec(t, `CREATE PUBLICATION other FOR TABLE w`)
			e.exec(t, `SELECT pg_create_logical_replication_slot('`+e.tr+`', 'pgoutput')`)
			e.confirmLive(t, e.write(t)) // the live slot is ahead of it
			e.exec(t, `SELECT count(*) FROM pg_logical_slot_get_binary_changes('`+e.tr+`', NULL, NULL, 'proto_version', '1', 'publication_names', 'other')`)
			_, _, err := retention.EnsureSlot(ctxT(t), e.conn, e.live, e.tr)
			if !errors.Is(err, retention.ErrSlotMismatch) || !strings.Contains(err.Error(), "decoded") {
				t.Fatalf("EnsureSlot over a slot another consumer decoded: %v, want ErrSlotMismatch saying it was decoded", err)
			}
		})
		t.Run("ahead", func(t *testing.T) {
			e := newEnvOn(t, srv)
			e.write(t) // not confirmed by the live slot
			e.exec(t, `SELECT pg_create_logical_replication_slot('`+e.tr+`', 'pgoutput')`)
			_, _, err := retention.EnsureSlot(ctxT(t), e.conn, e.live, e.tr)
			if !errors.Is(err, retention.ErrSlotMismatch) || !strings.Contains(err.Error(), "ahead of") {
				t.Fatalf("EnsureSlot over a slot ahead of the live slot: %v, want ErrSlotMismatch saying it is ahead", err)
			}
		})
		t.Run("own", func(t *testing.T) {
			e := newEnvOn(t, srv)
			e.exec(t, `CREATE PUBLICATION other FOR TABLE w`)
			if _, _, err := retention.EnsureSlot(ctxT(t), e.conn, e.live, e.tr); err != nil {
				t.Fatal(err)
			}
			for range 3 {
				lsn := e.write(t)
				e.confirmLive(t, lsn)
				if _, err := retention.Advance(ctxT(t), e.conn, e.live, e.tr, lsn); err != nil {
					t.Fatal(err)
				}
			}
			// What walbox replay and slotctl's counting do: decode a
			// temporary copy, never the trailing slot.
			e.write(t)
			e.exec(t, `SELECT pg_copy_logical_replication_slot('`+e.tr+`', '`+e.tr+`_tmp', true)`)
			e.exec(t, `SELECT count(*) FROM pg_logical_slot_get_binary_changes('`+e.tr+`_tmp', NULL, NULL, 'proto_version', '1', 'publication_names', 'other')`)
			e.exec(t, `SELECT pg_drop_replication_slot('`+e.tr+`_tmp')`)
			if _, _, err := retention.EnsureSlot(ctxT(t), e.conn, e.live, e.tr); err != nil {
				t.Fatalf("EnsureSlot over walbox's own trailing slot: %v", err)
			}
		})
	})
}

// TestAdvanceMissingSaysWhen: a missing trailing slot is created again on
// the keeper's next attempt, seconds later, not "on its next start" as the
// error used to say (issue 17, item 9).
func TestAdvanceMissingSaysWhen(t *testing.T) {
	e := newEnv(t)
	_, err := retention.Advance(ctxT(t), e.conn, e.live, e.tr, e.write(t))
	if err == nil || strings.Contains(err.Error(), "next start") || !strings.Contains(err.Error(), "next attempt") {
		t.Fatalf("Advance of a missing trailing slot: %v; want it to say it is created again on the next attempt", err)
	}
}
