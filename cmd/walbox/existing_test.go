package main

import (
	"strings"
	"testing"
)

// TestRunWarnsOfExistingRows: the start that creates the slot over an
// outbox already holding rows warns that they will not be sent, and how to
// send them; a later start does not.
//
// Regression (issue 15): following the quickstart, the example event was
// written before walbox's first start; walbox logged only "created the
// replication slot" and the event was never sent.
func TestRunWarnsOfExistingRows(t *testing.T) {
	e := newSetupEnv(t)
	e.exec(t, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
	           SELECT 'order', g::text, 'OrderCreated', '{}' FROM generate_series(1, 4) g`)
	if _, err := e.setup(t); err != nil {
		t.Fatalf("first start: %v", err)
	}
	logs := e.logs.String()
	for _, s := range []string{"level=WARN", "public.outbox already holds 4 rows", "will not be sent", "--create-slot --snapshot all"} {
		if !strings.Contains(logs, s) {
			t.Errorf("first start's log lacks %q:\n%s", s, logs)
		}
	}
	before := strings.Count(logs, "already holds")
	if _, err := e.setup(t); err != nil {
		t.Fatalf("second start: %v", err)
	}
	if n := strings.Count(e.logs.String(), "already holds"); n != before {
		t.Errorf("a start that found the slot warned again:\n%s", e.logs)
	}
}
