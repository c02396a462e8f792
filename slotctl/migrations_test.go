package slotctl_test

import "testing"

// TestMigrationsIdempotent applies every migration twice, as an operator
// re-running them would.
func TestMigrationsIdempotent(t *testing.T) {
	files := []string{"001_outbox.sql", "002_publication.sql", "003_walbox_role.sql", "004_emit_message_privilege.sql", "005_heartbeat_function.sql"}
	e := newEnv(t, nil, files...)
	for _, f := range files {
		e.migrate(t, f)
	}
	e.exec(t, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
	           VALUES ('order', '1', 'OrderCreated', '{}')`)
	if _, err := e.conn.Exec(ctxT(t), `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload, headers)
	           VALUES ('order', '1', 'OrderCreated', '{}', '[]')`); err == nil {
		t.Error("headers that are not a JSON object were accepted")
	}
}
