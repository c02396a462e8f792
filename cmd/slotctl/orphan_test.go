package main

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestOrphanedTrailingSlots: after a rollback, a cutover or a --slot
// rename the old "<slot>_replay" is left behind and holds WAL forever.
// list marks it, and drop of a live slot names its trailing slot and
// drops it too with --replay-slot-too. Before, list left such a slot
// unmarked and drop said nothing of it (issue 17, item 4).
func TestOrphanedTrailingSlots(t *testing.T) {
	in, conn, slot := setup(t)
	in.run(t, "create").want(t, exitOK, nil, nil)
	var (
		replay = slot + "_replay"
		orphan = slot + "old_replay" // its live slot <slot>old is gone
	)
	mustExec(t, conn, "SELECT pg_copy_logical_replication_slot($1, $2)", slot, replay)
	mustExec(t, conn, "SELECT pg_copy_logical_replication_slot($1, $2)", slot, orphan)

	r := in.run(t, "list", "--json")
	r.want(t, exitOK, nil, nil)
	var got struct {
		Slots []struct{ Name, Walbox, Trails string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &got); err != nil {
		t.Fatal(err)
	}
	marks := map[string]string{}
	for _, s := range got.Slots {
		marks[s.Name] = s.Walbox + "/" + s.Trails
	}
	if marks[slot] != "live/" || marks[replay] != "replay/"+slot || marks[orphan] != "orphan/"+slot+"old" {
		t.Errorf("marks = %v, want %s live, %s replay of %s, %s orphan of %sold", marks, slot, replay, slot, orphan, slot)
	}
	in.run(t, "list").want(t, exitOK, []string{"orphaned trailing slot " + orphan + ": its live slot " + slot + "old no longer exists",
		"slotctl drop --slot " + orphan}, nil)

	// Dropping the live slot names the trailing slot it would orphan.
	invocation{env: in.env, tty: true, stdin: "no\n"}.run(t, "drop").
		want(t, exitError, nil, []string{`trailing replay slot "` + replay + `"`, "--replay-slot-too"})
	in.run(t, "drop", "--yes", "--replay-slot-too").
		want(t, exitOK, []string{"dropped slot " + slot, "dropped slot " + replay}, nil)
	left := slotNames(t, conn)
	if slices.Contains(left, slot) || slices.Contains(left, replay) || !slices.Contains(left, orphan) {
		t.Errorf("slots left = %v, want %s only of these three", left, orphan)
	}
	// Now the orphan's live slot and the dropped one are both gone.
	in.run(t, "list").want(t, exitOK, []string{"orphaned trailing slot " + orphan}, nil)
	if r := in.run(t, "list"); strings.Contains(r.stdout, replay+" ") {
		t.Errorf("list still shows %s", replay)
	}
}
