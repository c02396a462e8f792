package slotctl_test

import (
	"log/slog"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/slotctl"
)

// TestSetupWarnsOfUnusedTrailingSlots: walbox warns at start about a
// trailing-looking slot it no longer uses, since nothing advances it and
// it holds WAL: "<slot>_replay" while --replay-window is off, and
// "<name>_replay" whose slot <name> is gone (a --slot rename, a cutover).
// The one in use, a slot another consumer decoded and an active slot are
// not warned about. Before, nothing was said (issue 17, item 4).
func TestSetupWarnsOfUnusedTrailingSlots(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql")
	ctx := ctxT(t)
	cfg := slotctl.Config{Slot: e.db, CreateMissing: true}
	if _, _, err := slotctl.Setup(ctx, e.srv.DSN(e.db), cfg, slotctl.SetupOptions{}); err != nil {
		t.Fatal(err)
	}
	var (
		own     = e.db + "_replay"    // --replay-window turned off
		renamed = e.db + "old_replay" // its live slot is gone
		inUse   = e.db + "_keep"      // --replay-slot in use
		foreign = e.db + "x_replay"   // decoded by its consumer
	)
	for _, s := range []string{own, renamed, inUse, foreign} {
		e.exec(t, "SELECT pg_copy_logical_replication_slot('"+e.db+"', '"+s+"')")
	}
	e.exec(t, "INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', '1', 'e', '{}')",
		"SELECT count(*) FROM pg_logical_slot_get_binary_changes('"+foreign+"', NULL, NULL, 'proto_version', '1', 'publication_names', 'walbox')")

	setup := func(replaySlot string) string {
		var buf logbuf.Buffer
		_, _, err := slotctl.Setup(ctx, e.srv.DSN(e.db), cfg, slotctl.SetupOptions{
			Logger: slog.New(slog.NewTextHandler(&buf, nil)), ReplaySlot: replaySlot})
		if err != nil {
			t.Fatal(err)
		}
		return buf.String()
	}
	warned := func(log, slot string) bool {
		for _, l := range strings.Split(log, "\n") {
			if strings.Contains(l, "level=WARN") && strings.Contains(l, "slot="+slot+" ") && strings.Contains(l, "no longer uses") {
				return true
			}
		}
		return false
	}
	log := setup("")
	for slot, want := range map[string]bool{own: true, renamed: true, inUse: false, foreign: false} {
		if warned(log, slot) != want {
			t.Errorf("without a trailing slot in use: warned of %s = %t, want %t\n%s", slot, !want, want, log)
		}
	}
	log = setup(own)
	if warned(log, own) || !warned(log, renamed) {
		t.Errorf("with %s in use: want a warning of %s only\n%s", own, renamed, log)
	}
}
