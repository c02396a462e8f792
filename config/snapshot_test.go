package config

import (
	"strings"
	"testing"
)

// TestSnapshotOptions: package snapshot decides what is valid; config
// reports it under the flag, environment variable and YAML key.
func TestSnapshotOptions(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		file    string
		wantErr string // "" for success
		check   func(t *testing.T, c Config)
	}{
		{name: "default none", check: func(t *testing.T, c Config) {
			if sc := c.SnapshotConfig(); sc.Mode != "none" || len(sc.Order) != 1 || sc.Order[0] != "id" {
				t.Errorf("SnapshotConfig() = %+v, want mode none ordered by id", sc)
			}
		}},
		{name: "pending with where", args: []string{"--snapshot", "pending", "--snapshot-where", "sent_at IS NULL"}},
		{name: "order defaults to the mapped id column", args: []string{"--snapshot", "all", "--column-id", "event_id"},
			check: func(t *testing.T, c Config) {
				if o := c.SnapshotConfig().Order; len(o) != 1 || o[0] != "event_id" {
					t.Errorf("order %v, want [event_id]", o)
				}
			}},
		{name: "order list", args: []string{"--snapshot", "all", "--snapshot-order", "created_at, pos"},
			check: func(t *testing.T, c Config) {
				if o := c.SnapshotConfig().Order; len(o) != 2 || o[0] != "created_at" || o[1] != "pos" {
					t.Errorf("order %v, want [created_at pos]", o)
				}
			}},
		{name: "pending without where is refused", args: []string{"--snapshot", "pending"},
			wantErr: `--snapshot-where (WALBOX_SNAPSHOT_WHERE): --snapshot pending needs --snapshot-where`},
		{name: "where without pending is refused", args: []string{"--snapshot-where", "sent_at IS NULL"},
			wantErr: `--snapshot-where (WALBOX_SNAPSHOT_WHERE): --snapshot-where is set but --snapshot is "none"`},
		{name: "unknown mode", args: []string{"--snapshot", "some"}, wantErr: `invalid value "some" for --snapshot (WALBOX_SNAPSHOT)`},
		{name: "order with an expression", args: []string{"--snapshot", "all", "--snapshot-order", "id DESC"},
			wantErr: `--snapshot-order (WALBOX_SNAPSHOT_ORDER)`},
		{name: "from the file", file: "snapshot: pending\nsnapshot_where: \"sent_at IS NULL\"\nsnapshot_order: pos\n",
			check: func(t *testing.T, c Config) {
				if sc := c.SnapshotConfig(); sc.Mode != "pending" || sc.Where != "sent_at IS NULL" || sc.Order[0] != "pos" {
					t.Errorf("SnapshotConfig() = %+v", sc)
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := load(t, tt.args, nil, tt.file)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Load error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}
