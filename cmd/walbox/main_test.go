package main

import (
	"strings"
	"testing"
)

// TestMainCodeUsageErrors: a configuration the router refuses is a usage
// error, exit 2, naming the flag and the environment variable.
//
// Regression (issue 7, drift b): --dead-letter-topic with the default
// --invalid-rows fail passed config and was refused by router.New at start:
// exit 1 with "router: dead_letter_topic is set but invalid_rows is fail",
// naming YAML keys instead of the flag.
func TestMainCodeUsageErrors(t *testing.T) {
	env := map[string]string{"WALBOX_PG_DSN": "postgres://walbox@127.0.0.1:1/app", "WALBOX_KAFKA_BROKERS": "127.0.0.1:1"}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{name: "dead-letter topic with the fail policy", args: []string{"run", "--dead-letter-topic", "dlq"}, code: exitUsage,
			stderr: []string{`invalid value "dlq" for --dead-letter-topic (WALBOX_DEAD_LETTER_TOPIC)`, `--invalid-rows is "fail"`}},
		{name: "bad template and bad slot at once", args: []string{"run", "--topic", "x.{", "--slot", "Bad"}, code: exitUsage,
			stderr: []string{"--topic (WALBOX_TOPIC)", "--slot (WALBOX_SLOT)"}},
		{name: "help shows the owners' defaults", args: []string{"run", "--help"}, code: exitOK},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := mainCode(tt.args, func(k string) string { return env[k] }, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit code %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			for _, s := range tt.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q: %s", s, stderr.String())
				}
			}
			if tt.code == exitOK {
				for _, s := range []string{"--topic TEMPLATE  (default outbox.event.{aggregate_type})", "--status-interval DURATION  (default 1s)", "wal_sender_timeout"} {
					if !strings.Contains(stdout.String(), s) {
						t.Errorf("help lacks %q", s)
					}
				}
			}
		})
	}
}
