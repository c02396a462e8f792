package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSourcesPrecedence(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "walbox.yaml")
	yaml := "pg_dsn: postgres://file@db/app\nkafka_brokers: [file:9092]\nstatus_interval: 4s\nslot: file_slot\n"
	if err := os.WriteFile(file, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"WALBOX_STATUS_INTERVAL": "3s",
		"WALBOX_SLOT":            "env_slot",
	}
	args := []string{"--config", file, "--slot", "flag_slot"}
	settings, _, err := Command{Name: "walbox config check"}.Sources(args, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		flag, value, source string
		kind                SourceKind
	}{
		{"slot", "flag_slot", "--slot", SourceFlag},                    // flag beats env and file
		{"status-interval", "3s", "WALBOX_STATUS_INTERVAL", SourceEnv}, // env beats file
		{"kafka-brokers", "file:9092", file + ":2", SourceFile},        // file beats default
		{"publication", "walbox", "default", SourceDefault},
	}
	for _, tt := range tests {
		t.Run(tt.flag, func(t *testing.T) {
			s := settingOf(t, settings, tt.flag)
			if s.Value != tt.value || s.Source != tt.source || s.Kind != tt.kind {
				t.Errorf("--%s = %q from %q (%v), want %q from %q (%v)", tt.flag, s.Value, s.Source, s.Kind, tt.value, tt.source, tt.kind)
			}
		})
	}
}

func TestSourcesRedactsAndListsProblems(t *testing.T) {
	const secret = "pa55-word-xyz"
	args := []string{"--pg-dsn", "postgres://walbox:" + secret + "@db/app", "--status-interval", "soon"}
	settings, _, err := Command{Name: "walbox config check"}.Sources(args, nil)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("err = %v, want ErrInvalid", err)
	}
	// Both problems, at once: the bad duration and the missing brokers.
	for _, want := range []string{"--status-interval", "missing --kafka-brokers"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("problems %q do not mention %q", err, want)
		}
	}
	if settings == nil {
		t.Fatal("no settings returned with the problems")
	}
	dsn := settingOf(t, settings, "pg-dsn")
	if strings.Contains(dsn.Value, secret) || !strings.Contains(dsn.Value, "xxxxx") {
		t.Errorf("--pg-dsn shown as %q, want the password masked", dsn.Value)
	}
	if s := settingOf(t, settings, "status-interval"); !s.Invalid || s.Source != "--status-interval" {
		t.Errorf("--status-interval = %+v, want Invalid from the flag", s)
	}
	if strings.Contains(err.Error(), secret) {
		t.Errorf("problems contain the password: %v", err)
	}
}

func TestScrub(t *testing.T) {
	c := Defaults()
	c.PGDSN = "postgres://walbox:longsecret@db/app"
	if got := c.Scrub("failed: password longsecret rejected"); strings.Contains(got, "longsecret") {
		t.Errorf("Scrub left the secret: %q", got)
	}
}

func settingOf(t *testing.T, settings []Setting, flag string) Setting {
	t.Helper()
	for _, s := range settings {
		if s.Flag == flag {
			return s
		}
	}
	t.Fatalf("no setting for --%s", flag)
	return Setting{}
}
