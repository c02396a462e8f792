package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes a walbox.yaml for --config.
func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "walbox.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestSharedConfiguration: slotctl reads walbox's configuration through
// walbox's option table: flags, WALBOX_* variables and --config walbox.yaml,
// with walbox's messages. It used to read four environment variables of its
// own and knew nothing of the file.
func TestSharedConfiguration(t *testing.T) {
	const dsn = "postgres://x@127.0.0.1:1/x"
	walboxFile := "pg_dsn: " + dsn + "\nkafka_brokers: [localhost:9092]\nslot: Bad-Slot\nlog_level: debug\ncolumns: {aggregate_type: kind}\n"
	tests := []struct {
		name   string
		args   []string
		env    map[string]string
		code   int
		stderr []string
		not    []string
	}{
		{name: "a walbox.yaml is read, its other keys ignored", args: []string{"inspect", "--config", writeFile(t, walboxFile)},
			code: exitUsage, stderr: []string{`walbox.yaml:3: slot: invalid value "Bad-Slot" for --slot (WALBOX_SLOT)`},
			not: []string{"kafka", "log_level", "unknown key"}},
		{name: "WALBOX_CONFIG", args: []string{"drop", "--yes"}, env: map[string]string{"WALBOX_CONFIG": writeFile(t, walboxFile)},
			code: exitUsage, stderr: []string{"walbox.yaml:3: slot: invalid value"}},
		{name: "a flag beats the file", args: []string{"inspect", "--config", writeFile(t, walboxFile), "--slot", "Also-Bad"},
			code: exitUsage, stderr: []string{`invalid value "Also-Bad" for --slot (WALBOX_SLOT)`}, not: []string{"Bad-Slot"}},
		{name: "an unknown key is still reported", args: []string{"inspect", "--config", writeFile(t, "pg_dsn: "+dsn+"\nslott: x\n")},
			code: exitUsage, stderr: []string{`unknown key "slott" (did you mean "slot"?)`}},
		{name: "options slotctl does not use are ignored in the environment",
			args: []string{"inspect"}, env: map[string]string{"WALBOX_PG_DSN": dsn, "WALBOX_KAFKA_BROKERS": "nonsense", "WALBOX_SLOT": "Bad"},
			code: exitUsage, stderr: []string{"environment: invalid value \"Bad\" for --slot (WALBOX_SLOT)"}, not: []string{"kafka"}},
		{name: "a walbox option slotctl does not take is not a flag", args: []string{"inspect", "--kafka-brokers", "k:9092"},
			code: exitUsage, stderr: []string{"unknown option --kafka-brokers", `run "slotctl inspect --help"`}},
		{name: "create validates the routing like walbox run", args: []string{"create", "--pg-dsn", dsn, "--topic", "x.{", "--dead-letter-topic", "dlq"},
			code: exitUsage, stderr: []string{`invalid value "x.{" for --topic (WALBOX_TOPIC): unclosed {`, `invalid value "dlq" for --dead-letter-topic (WALBOX_DEAD_LETTER_TOPIC)`}},
		{name: "all problems at once", args: []string{"inspect", "--slot", "Bad", "--table", "a.b.c"}, env: map[string]string{},
			code: exitUsage, stderr: []string{"missing --pg-dsn (WALBOX_PG_DSN)", "--slot (WALBOX_SLOT)", "--table (WALBOX_TABLE)"}},
		{name: "timeout is slotctl's own flag", args: []string{"inspect", "--pg-dsn", dsn, "--timeout", "0s"},
			code: exitUsage, stderr: []string{"--timeout must be positive"}},
		{name: "subcommand help lists the shared options with env and key", args: []string{"create", "--help"},
			code: exitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := invocation{env: tt.env}.run(t, tt.args...)
			r.want(t, tt.code, nil, tt.stderr)
			for _, s := range tt.not {
				if strings.Contains(r.stderr, s) {
					t.Errorf("stderr mentions %q", s)
				}
			}
		})
	}
	r := invocation{}.run(t, "create", "--help")
	for _, s := range []string{"--config FILE", "env: WALBOX_PG_DSN   yaml: pg_dsn", "--failover-slot", "--column-aggregate-type", "yaml: columns.aggregate_type", "--timeout DURATION"} {
		if !strings.Contains(r.stdout, s) {
			t.Errorf("create --help lacks %q", s)
		}
	}
}

// secret is a password that must never be printed.
const secret = "Sup3rS3cret"

// assertNoSecret checks every output of a run.
func assertNoSecret(t *testing.T, r result) {
	t.Helper()
	if strings.Contains(r.stdout+r.stderr, secret) {
		t.Errorf("the password appears in the output:\nstdout: %s\nstderr: %s", r.stdout, r.stderr)
	}
}

// TestDSNPasswordNotPrinted: slotctl echoed a malformed DSN with its
// password ("--pg-dsn: cannot parse `postgres://walbox:Sup3rS3cret`:
// invalid port", issue 7 item 9). Now the DSN goes through walbox's
// configuration, which redacts it.
func TestDSNPasswordNotPrinted(t *testing.T) {
	for _, dsn := range []string{
		"postgres://walbox:" + secret,
		"postgres://walbox:" + secret + "@db:99999/app",
		"host=db password=" + secret + " port=http",
	} {
		for _, cmd := range []string{"create", "inspect", "drop"} {
			t.Run(cmd+" "+dsn, func(t *testing.T) {
				r := invocation{}.run(t, cmd, "--yes", "--pg-dsn", dsn)
				if cmd != "drop" {
					r = invocation{env: map[string]string{"WALBOX_PG_DSN": dsn}}.run(t, cmd)
				}
				r.want(t, exitUsage, nil, []string{"--pg-dsn (WALBOX_PG_DSN)", "xxxxx"})
				assertNoSecret(t, r)
			})
		}
	}
	// A well-formed DSN that cannot connect.
	r := invocation{}.run(t, "inspect", "--pg-dsn", "postgres://walbox:"+secret+"@127.0.0.1:1/app?connect_timeout=2")
	r.want(t, exitError, nil, []string{"connect to postgres"})
	assertNoSecret(t, r)
}

// TestSucceedingRunsPrintNoSecret runs every command successfully against
// Postgres with a DSN holding a password (the test server trusts local
// connections, so it is never checked) and replication=database, read from
// a walbox.yaml, and greps all their output for the password. The DSN with
// replication=database is accepted, as walbox run accepts it.
func TestSucceedingRunsPrintNoSecret(t *testing.T) {
	in, _, slot := setup(t)
	dsn := in.env["WALBOX_PG_DSN"] + "&password=" + secret + "&replication=database"
	file := writeFile(t, "pg_dsn: '"+dsn+"'\nslot: "+slot+"\nkafka_brokers: [localhost:9092]\ncolumns:\n  aggregate_type: aggregate_type\n")
	cfg := invocation{env: map[string]string{"WALBOX_CONFIG": file}}
	for _, args := range [][]string{
		{"create"},
		{"create", "--failover-slot=false"},
		{"inspect"},
		{"inspect", "--json"},
		{"drop", "--yes", "--publication-too"},
	} {
		r := cfg.run(t, args...)
		r.want(t, exitOK, nil, nil)
		assertNoSecret(t, r)
	}
}
