package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const checkConnector = `name=outbox-connector
connector.class=io.debezium.connector.postgresql.PostgresConnector
tasks.max=1
database.hostname=db
database.user=dbz
database.password=hunter2-very-secret
database.dbname=app
topic.prefix=app
plugin.name=pgoutput
table.include.list=public.outbox,billing.outbox
transforms=outbox
transforms.outbox.type=io.debezium.transforms.outbox.EventRouter
transforms.outbox.route.by.field=aggregate_type
key.converter=org.apache.kafka.connect.storage.StringConverter
value.converter=org.apache.kafka.connect.json.JsonConverter
value.converter.schemas.enable=false
`

// walbox config check shows the translation of each Debezium key, the
// warnings and the overrides, with the password redacted; unsupported
// keys are problems (exit 2).
func TestConfigCheckDebezium(t *testing.T) {
	dir := t.TempDir()
	conn, worker := filepath.Join(dir, "c.properties"), filepath.Join(dir, "w.properties")
	if err := os.WriteFile(conn, []byte(checkConnector), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(worker, []byte("bootstrap.servers=k:9092\nplugin.path=/x\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"WALBOX_DEBEZIUM_CONFIG": conn, "WALBOX_DEBEZIUM_WORKER_CONFIG": worker}
	code, out, _ := runConfigCheck(t, env, "--slot", "mine")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		"--pg-dsn", "debezium " + conn + " (database.*)", // the source of a translated option
		"table.include.list", "--table", "public.outbox,billing.outbox",
		"transforms.outbox.route.by.field", "eventrouter.RouteByColumn",
		"tasks.max", "(warning)", "plugin.path",
		"--slot mine (given explicitly) wins over slot.name=debezium",
		"publication.autocreate.mode: all_tables",
		"OK: no problems found.",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "hunter2") {
		t.Errorf("output shows the password:\n%s", out)
	}

	if err := os.WriteFile(conn, []byte(checkConnector+"slot.drop.on.stop=true\nmystery.key=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, _ = runConfigCheck(t, env)
	if code != exitUsage || !strings.Contains(out, "slot.drop.on.stop=true") || !strings.Contains(out, "mystery.key=1") || !strings.Contains(out, "(unsupported)") {
		t.Errorf("unsupported keys: exit %d:\n%s", code, out)
	}
}
