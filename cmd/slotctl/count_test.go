package main

import (
	"fmt"
	"testing"
)

// TestCountsWhatWalboxRoutes: drop and advance count the events walbox
// would route, that is the inserts into the outbox table and, with
// --message-prefix, the transactional logical messages of that prefix.
// They used to count only inserts: 3 outbox messages were "0 unconfirmed
// events" (issue 17, item 5).
func TestCountsWhatWalboxRoutes(t *testing.T) {
	in, conn, slot := setup(t)
	in.env["WALBOX_MESSAGE_PREFIX"] = "outbox"
	in.run(t, "create").want(t, exitOK, nil, nil)
	insertEvents(t, conn, 2)
	mustExec(t, conn, `SELECT pg_logical_emit_message(true, 'outbox', '{"n":' || i || '}') FROM generate_series(1, 3) i`)
	// Not walbox's events: another prefix, a heartbeat, a non-transactional
	// message (walbox skips or dead-letters it, never routes it as an event).
	mustExec(t, conn, `SELECT pg_logical_emit_message(true, 'other', 'x')`)
	mustExec(t, conn, `SELECT pg_logical_emit_message(true, 'walbox_heartbeat', 'x')`)
	mustExec(t, conn, `SELECT pg_logical_emit_message(false, 'outbox', 'x')`)
	target := currentLSN(t, conn)
	mustExec(t, conn, `SELECT pg_logical_emit_message(true, 'outbox', 'after')`)

	in.run(t, "advance", "--to", target.String(), "--yes", "--slot", slot).
		want(t, exitOK, nil, []string{"and 5 outbox event(s) (inserts into public.outbox and messages with prefix \"outbox\")"})
	in.run(t, "drop", "--yes").want(t, exitOK, []string{"dropped slot " + slot},
		[]string{fmt.Sprintf("holds 1 unconfirmed outbox event(s) after %s (inserts into public.outbox and messages with prefix \"outbox\")", target)})

	// Without a prefix, messages are not walbox's events.
	delete(in.env, "WALBOX_MESSAGE_PREFIX")
	in.run(t, "create").want(t, exitOK, nil, nil)
	insertEvents(t, conn, 1)
	mustExec(t, conn, `SELECT pg_logical_emit_message(true, 'outbox', 'x')`)
	in.run(t, "drop", "--yes").want(t, exitOK, nil, []string{"holds 1 unconfirmed outbox event(s)", "(inserts into public.outbox)"})
}
