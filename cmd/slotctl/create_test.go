package main

import (
	"strings"
	"testing"
)

// TestCreateWarnsOfExistingRows: `slotctl create` over an outbox that
// already holds rows creates the slot (exit 0) and warns on stderr that
// those rows will not be sent, naming the table, the count and the fix.
//
// Regression (issue 15): the quickstart wrote its example event before
// `slotctl create`; create said only "slot walbox: created" and the event
// was never sent.
func TestCreateWarnsOfExistingRows(t *testing.T) {
	in, conn, slot := setup(t)
	insertEvents(t, conn, 3)

	r := in.run(t, "create")
	r.want(t, exitOK, []string{"slot " + slot + ": created"},
		[]string{"slotctl create: warning: public.outbox already holds 3 rows", "will not be sent",
			"slotctl drop --slot " + slot, "walbox", "--create-slot --snapshot all", "INSERT INTO public.outbox SELECT * FROM moved"})
	if strings.Contains(r.stdout, "already holds") {
		t.Error("the warning went to stdout, which is for data")
	}

	// The slot exists now: what the table holds is the slot's business.
	insertEvents(t, conn, 1)
	r = in.run(t, "create")
	r.want(t, exitOK, []string{"slot " + slot + ": already exists"}, nil)
	if strings.Contains(r.stderr, "already holds") {
		t.Errorf("warned again when the slot existed: %s", r.stderr)
	}

	// An empty outbox: no warning.
	in, _, _ = setup(t)
	if r := in.run(t, "create"); r.code != exitOK || strings.Contains(r.stderr, "already holds") {
		t.Errorf("create over an empty outbox: exit %d, stderr %q", r.code, r.stderr)
	}
}
