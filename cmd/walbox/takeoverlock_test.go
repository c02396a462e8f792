package main

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/snapshot"
)

// TestPlainRunWaitsForTakeover: a `walbox run` without --snapshot checks
// the takeover's pending marker under the takeover's advisory lock. It
// used to read the marker without the lock: started while a takeover
// held the lock but had not written the marker yet, it found no marker
// and went on to the slot, and could stream new events before the
// snapshot's rows (issue 17, item 8). Now it waits for the lock and then
// sees what the takeover left.
func TestPlainRunWaitsForTakeover(t *testing.T) {
	parallel(t)
	e := newSetupEnv(t)
	if _, err := e.setup(t); err != nil {
		t.Fatalf("first start: %v", err)
	}
	e.exec(t, "SELECT pg_drop_replication_slot($1)", e.cfg.Slot)

	// A takeover of the slot holds the lock and has not marked the
	// publication yet.
	tk, err := pgx.Connect(ctxT(t), e.cfg.PGDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer tk.Close(context.Background())
	if _, err := tk.Exec(ctxT(t), `SELECT pg_advisory_lock(hashtext('walbox snapshot ' || $1))`, e.cfg.Slot); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := setupSlotOrTakeover(ctxT(t), e.cfg, e.rt, nil, nil, newLogger(e.cfg, e.logs))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("plain start returned while a takeover held its lock: %v", err)
	case <-time.After(time.Second):
	}

	// The takeover marks the publication, creates the slot and dies before
	// its snapshot is acknowledged: the lock goes with its session.
	if _, err := tk.Exec(ctxT(t), "COMMENT ON PUBLICATION walbox IS '"+snapshot.SnapshotMarker(e.cfg.Slot)+"'"); err != nil {
		t.Fatal(err)
	}
	e.exec(t, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", e.cfg.Slot)
	tk.Close(context.Background())

	select {
	case err := <-done:
		if !errors.Is(err, snapshot.ErrSnapshotPending) {
			t.Fatalf("plain start after the takeover died = %v, want ErrSnapshotPending", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("plain start still waiting after the takeover released its lock")
	}
	if !e.slotExists(t) {
		t.Error("slot gone")
	}
}
