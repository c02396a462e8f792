package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// TestReplayOptions: --replay-window and --replay-slot come from flags,
// the environment and the file like every option, and retention's checks
// are reported under the option they concern.
func TestReplayOptions(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		env        map[string]string
		file       string
		wantWindow time.Duration
		wantSlot   string // ReplaySlotName()
		wantErr    string
	}{
		{name: "defaults: off, <slot>_replay", wantSlot: "walbox_replay"},
		{name: "flag", args: []string{"--replay-window", "24h"}, wantWindow: 24 * time.Hour, wantSlot: "walbox_replay"},
		{name: "env", env: map[string]string{"WALBOX_REPLAY_WINDOW": "90m", "WALBOX_REPLAY_SLOT": "keep_it"}, wantWindow: 90 * time.Minute, wantSlot: "keep_it"},
		{name: "file", file: "replay_window: 2h\nreplay_slot: trail\nslot: main\n", wantWindow: 2 * time.Hour, wantSlot: "trail"},
		{name: "default name follows --slot", args: []string{"--slot", "orders", "--replay-window", "1h"}, wantWindow: time.Hour, wantSlot: "orders_replay"},
		{name: "negative window", args: []string{"--replay-window", "-1h"},
			wantErr: `invalid value "-1h0m0s" for --replay-window (WALBOX_REPLAY_WINDOW): window -1h0m0s is negative; use 0 to disable`},
		{name: "not a duration", args: []string{"--replay-window", "1 day"}, wantErr: `--replay-window (WALBOX_REPLAY_WINDOW): expected a Go duration`},
		{name: "trailing slot is the live slot", args: []string{"--replay-slot", "walbox"},
			wantErr: `--replay-slot (WALBOX_REPLAY_SLOT): trailing slot "walbox" is the live slot; give --replay-slot another name`},
		{name: "bad trailing slot name", args: []string{"--replay-slot", "Bad-Name"}, wantErr: `--replay-slot (WALBOX_REPLAY_SLOT)`},
		{name: "default name too long, only when the window is on", args: []string{"--slot", strings.Repeat("s", 60), "--replay-window", "1h"},
			wantErr: `set --replay-slot`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, tt.env, tt.file)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load = %v, want ErrInvalid containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.ReplayWindow != tt.wantWindow || c.ReplaySlotName() != tt.wantSlot {
				t.Errorf("window %s, slot %q; want %s, %q", c.ReplayWindow, c.ReplaySlotName(), tt.wantWindow, tt.wantSlot)
			}
		})
	}
}
