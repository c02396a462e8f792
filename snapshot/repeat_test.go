package snapshot_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
)

// TestTakeoverNotRepeated: `--snapshot pending --snapshot-where "sent_at
// IS NULL"` left in the configuration after the takeover, and the slot
// later recreated (the vanished-slot advice: start once with
// --create-slot), took the snapshot again, and since walbox never sets
// sent_at, re-sent every row still in the table (issue 17, item 6). The
// finished takeover is now recorded on the publication, and a second
// snapshot with the same selection is refused; another selection (the
// advised re-publishing by time) is taken.
func TestTakeoverNotRepeated(t *testing.T) {
	e := newStateEnv(t)
	if res, err := e.takeover(&capture{}); err != nil || !res.Taken {
		t.Fatalf("takeover: %+v, %v", res, err)
	}
	// walbox streams for a while; the rows it sends keep sent_at NULL.
	e.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, body) SELECT 'order', 'ord-1', 'E', '{}', '\x00' FROM generate_series(1, 5)`)
	e.exec(`SELECT pg_drop_replication_slot('walbox')`) // vanished

	again := func(where string) (snapshot.Result, *capture, error) {
		c := &capture{}
		res, err := snapshot.Takeover(e.ctx, snapshot.Options{
			ConnString: e.dsn,
			Slotctl:    slotctl.Config{CreateMissing: true},
			Snapshot:   snapshot.Config{Mode: snapshot.ModePending, Where: where, Order: []string{"id"}},
			Router:     e.rt, Producer: c, SlotBusyTimeout: 10 * time.Second,
		})
		return res, c, err
	}
	res, c, err := again("sent_at IS NULL")
	if !errors.Is(err, snapshot.ErrSnapshotRepeated) || !strings.Contains(err.Error(), "--snapshot") || len(c.records()) != 0 {
		t.Fatalf("takeover again with the same selection: %+v, %v, %d records; want ErrSnapshotRepeated and nothing sent", res, err, len(c.records()))
	}
	var slots int
	if err := e.conn.QueryRow(e.ctx, `SELECT count(*) FROM pg_replication_slots`).Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("refused takeover left %d slots (%v)", slots, err)
	}
	res, c, err = again("created_at >= now() - interval '1 hour' AND id > 30")
	if err != nil || !res.Taken || len(c.records()) != 5 {
		t.Fatalf("takeover with a selection by time: %+v, %v, %d records; want the 5 rows", res, err, len(c.records()))
	}
}

// TestTakeoverSaysHowTheSlotMoved: an unfinished takeover's slot that is
// no longer at the recorded consistent point was either streamed from or
// dropped and created again; the error used to say "something streamed
// from it" for both. The server's statistics tell them apart (issue 17,
// item 9).
func TestTakeoverSaysHowTheSlotMoved(t *testing.T) {
	e := newStateEnv(t)
	if _, err := e.takeover(&failing{}); !errors.Is(err, snapshot.ErrProduce) {
		t.Fatalf("first takeover: %v", err)
	}
	e.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, body) VALUES ('order', 'ord-1', 'E', '{}', '\x00')`)
	e.exec(`SELECT pg_drop_replication_slot('walbox')`)
	e.exec(`SELECT pg_create_logical_replication_slot('walbox', 'pgoutput')`)
	_, err := e.takeover(&capture{})
	if !errors.Is(err, snapshot.ErrSnapshotPending) || strings.Contains(err.Error(), "something streamed") || !strings.Contains(err.Error(), "created again") {
		t.Fatalf("takeover of a recreated slot: %v, want ErrSnapshotPending saying it was created again", err)
	}
	e.exec(`INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, body) VALUES ('order', 'ord-1', 'E', '{}', '\x00')`)
	e.exec(`SELECT count(*) FROM pg_logical_slot_get_binary_changes('walbox', NULL, NULL, 'proto_version', '1', 'publication_names', 'walbox')`)
	_, err = e.takeover(&capture{})
	if !errors.Is(err, snapshot.ErrSnapshotPending) || !strings.Contains(err.Error(), "something streamed from it") {
		t.Fatalf("takeover of a streamed slot: %v, want ErrSnapshotPending saying something streamed from it", err)
	}
}
