package main

import (
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/pipeline"
)

// TestReplayUsage: walbox replay's own mistakes are usage errors (exit 2)
// found before connecting anywhere, and say what is expected.
func TestReplayUsage(t *testing.T) {
	env := map[string]string{"WALBOX_PG_DSN": "postgres://walbox@127.0.0.1:1/app", "WALBOX_KAFKA_BROKERS": "127.0.0.1:1"}
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout []string
		stderr []string
	}{
		{name: "help", args: []string{"--help"}, code: exitOK,
			stdout: []string{"--from LSN|TIME", "walbox_replay: true", "--replay-slot NAME", "--topic TEMPLATE"}},
		{name: "no --from", code: exitUsage, stderr: []string{"--from is required", "16/B374D848", "RFC 3339"}},
		{name: "malformed LSN", args: []string{"--from", "16/B374D84G"}, code: exitUsage, stderr: []string{`"16/B374D84G" is not an LSN: expected the form 16/B374D848`}},
		{name: "malformed --to", args: []string{"--from", "0/10", "--to", "tomorrow"}, code: exitUsage, stderr: []string{"--to:", "nor an RFC 3339 time"}},
		{name: "--to before --from", args: []string{"--from", "0/20", "--to", "0/10"}, code: exitUsage, stderr: []string{"--to 0/10 is before --from 0/20"}},
		{name: "times reversed", args: []string{"--from", "2026-11-30T22:00:00Z", "--to", "2026-11-30T21:00:00Z"}, code: exitUsage, stderr: []string{"is before --from"}},
		{name: "bad trailing slot name", args: []string{"--from", "0/10", "--replay-slot", "No"}, code: exitUsage, stderr: []string{"--replay-slot"}},
		{name: "an option of walbox run, checked as there", args: []string{"--from", "0/10", "--topic", "x.{"}, code: exitUsage, stderr: []string{"--topic (WALBOX_TOPIC)"}},
		{name: "unknown flag", args: []string{"--from", "0/10", "--form", "x"}, code: exitUsage, stderr: []string{"form"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			code := mainCode(append([]string{"replay"}, tt.args...), func(k string) string { return env[k] }, &stdout, &stderr)
			if code != tt.code {
				t.Errorf("exit code %d, want %d; stderr: %s", code, tt.code, stderr.String())
			}
			for _, s := range tt.stdout {
				if !strings.Contains(stdout.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, stdout.String())
				}
			}
			for _, s := range tt.stderr {
				if !strings.Contains(stderr.String(), s) {
					t.Errorf("stderr lacks %q: %s", s, stderr.String())
				}
			}
		})
	}
}

func TestWriteProgress(t *testing.T) {
	var b strings.Builder
	writeProgress(&b, pipeline.ReplayProgress{Events: 5000, WALDone: 3 << 20, WALTotal: 12 << 20, Elapsed: 10 * time.Second})
	want := "walbox replay: 5000 events, WAL 3.0 MiB of 12.0 MiB (25%), 500 events/s, 10s elapsed\n"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
}
