package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestMigrateUsageErrors(t *testing.T) {
	dir := t.TempDir()
	conn := filepath.Join(dir, "c.properties")
	if err := os.WriteFile(conn, []byte(checkConnector), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no debezium config", []string{"--pg-dsn", "postgres://x@db/app", "--kafka-brokers", "k:9092"}, "needs --debezium-config"},
		{"both offsets", []string{"--debezium-config", conn, "--kafka-brokers", "k:9092", "--debezium-offsets", "f", "--debezium-offsets-topic", "t"}, "not both"},
		{"exactly-once", []string{"--debezium-config", conn, "--kafka-brokers", "k:9092", "--debezium-offsets", "f", "--delivery", "exactly-once"}, "runs with --delivery at-least-once"},
		{"no offsets", []string{"--debezium-config", conn, "--kafka-brokers", "k:9092"}, "no offsets"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := mainCode(append([]string{"migrate-from-debezium"}, tt.args...), func(string) string { return "" }, &out, &errOut)
			if code != exitUsage || !strings.Contains(errOut.String(), tt.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errOut.String(), exitUsage, tt.want)
			}
		})
	}
	var out bytes.Buffer
	if code := mainCode([]string{"migrate-from-debezium", "--help"}, nil, &out, &out); code != exitOK || !strings.Contains(out.String(), "--debezium-offsets-topic") {
		t.Errorf("help: exit %d:\n%s", code, out.String())
	}
}
