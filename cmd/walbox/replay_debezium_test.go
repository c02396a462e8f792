package main

import (
	"os"
	"path/filepath"
	"testing"
)

// TestReplayDebeziumMode: in Debezium mode walbox replay sends the records
// the live stream sends, Debezium's (EventRouter topic, the "id" header, the
// raw payload through StringConverter), not walbox's own form. Before, a
// replay with --debezium-config silently used walbox's router.
func TestReplayDebeziumMode(t *testing.T) {
	parallel(t)
	e := newTableEnv(t)
	e.insert(t, "order", 2, 1, 2, 3)
	props := filepath.Join(t.TempDir(), "connector.properties")
	// The database keys are overridden by WALBOX_PG_DSN, as any explicit
	// option overrides the Debezium file.
	if err := os.WriteFile(props, []byte(`name=orders
connector.class=io.debezium.connector.postgresql.PostgresConnector
database.hostname=db.invalid
database.port=5432
database.user=nobody
database.dbname=nothing
topic.prefix=orders
plugin.name=pgoutput
table.include.list=public.outbox
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.table.field.event.key=aggregate_id
transforms.outbox.route.by.field=aggregate_type
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.storage.StringConverter
`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := e.replay(t, "--debezium-config", props, "--from-table", "--from-id", tid(1), "--to-id", tid(2))
	if code != exitOK {
		t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout, tail(stderr, 3000))
	}
	got := e.consume(t, `outbox\.event\..*`, 2)
	if len(got) != 2 {
		t.Fatalf("%d records, want 2", len(got))
	}
	for i, r := range got {
		if r.Topic != "outbox.event.order" || header(r, "id") != tid(i+1) || header(r, "event_id") != "" {
			t.Errorf("record %d: topic %s, headers %v; want Debezium's topic and id header, no event_id", i, r.Topic, r.Headers)
		}
		if want := `{"n": ` + string(rune('0'+i+1)) + `}`; string(r.Value) != want {
			t.Errorf("record %d value %s, want the payload's text %s", i, r.Value, want)
		}
		if want := "order-" + string(rune('0'+(i+1)%2)); string(r.Key) != want {
			t.Errorf("record %d key %s, want %s", i, r.Key, want)
		}
	}
}
