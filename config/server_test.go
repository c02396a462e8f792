package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// TestServerProblems: each problem the server reveals is named by the
// option that fixes it, with its flag, variable, YAML key and value; a
// problem of the server's own settings is left as it is.
func TestServerProblems(t *testing.T) {
	c := Defaults()
	c.PGDSN = "postgres://walbox:hunter2@db/app"
	c.Columns.Payload = "body"
	rt, err := router.New(c.RouterConfig())
	if err != nil {
		t.Fatal(err)
	}
	columns := rt.CheckColumns("public.outbox", []string{"id", "aggregate_type", "aggregate_id"})
	tests := []struct {
		name    string
		err     error
		want    []string // one per problem, substrings
		notWant string
	}{
		{
			name: "column", err: columns,
			want: []string{`--column-payload "body" (WALBOX_COLUMN_PAYLOAD, YAML key columns.payload): table public.outbox has no such column: column "body"; its columns are id, aggregate_type, aggregate_id`},
		},
		{
			name: "slot and role at once",
			err: errors.Join(fmt.Errorf("%w: slot %q does not exist", slotctl.ErrSlotVanished, "walbox"),
				fmt.Errorf("%w: role %q has neither SUPERUSER nor REPLICATION", slotctl.ErrNoReplicationPrivilege, "walbox")),
			want:    []string{`--slot "walbox" (WALBOX_SLOT, YAML key slot): replication slot vanished: slot "walbox"`, `--pg-dsn "postgres://walbox:xxxxx@db/app" (WALBOX_PG_DSN, YAML key pg_dsn)`},
			notWant: "hunter2",
		},
		{
			name: "a server setting names no option",
			err:  fmt.Errorf("%w: the server runs with wal_level = replica", slotctl.ErrWALLevel),
			want: []string{"slotctl: wal_level is not logical: the server runs with wal_level = replica"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := c.ServerProblems(tt.err)
			if len(got) != len(tt.want) {
				t.Fatalf("%d problems, want %d: %v", len(got), len(tt.want), got)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i].Error(), w) {
					t.Errorf("problem %d = %q, want it to contain %q", i, got[i], w)
				}
				if tt.notWant != "" && strings.Contains(got[i].Error(), tt.notWant) {
					t.Errorf("problem %d shows %q", i, tt.notWant)
				}
			}
		})
	}
	// The owners' sentinels still match.
	if got := c.ServerProblems(columns); !errors.Is(got[0], router.ErrInvalidConfig) {
		t.Errorf("a column problem does not wrap router.ErrInvalidConfig: %v", got[0])
	}
	if got := c.ServerProblems(tests[1].err); !errors.Is(got[0], slotctl.ErrSlotVanished) || !errors.Is(got[1], slotctl.ErrNoReplicationPrivilege) {
		t.Errorf("the slotctl problems do not wrap their sentinels: %v", got)
	}
}

// TestSplit: only errors.Join is undone; a problem wrapping two errors
// (ErrInvalid and its cause) stays one.
//
// Regression (issue 15): walbox config check split a YAML file's unknown
// key into ErrInvalid alone and printed "invalid configuration".
func TestSplit(t *testing.T) {
	p := problemf(errors.New("cause"), "bad.yaml:3: unknown key %q", "colums")
	two := fmt.Errorf("%w: %w", slotctl.ErrPublicationPrivilege, errors.New("pg"))
	got := Split(errors.Join(p, errors.Join(two, nil, errors.New("c"))))
	want := []string{`bad.yaml:3: unknown key "colums"`, "slotctl: not allowed to manage the publication: pg", "c"}
	if len(got) != len(want) {
		t.Fatalf("Split = %q, want %q", got, want)
	}
	for i := range want {
		if got[i].Error() != want[i] {
			t.Errorf("Split[%d] = %q, want %q", i, got[i], want[i])
		}
	}
	if Split(nil) != nil {
		t.Error("Split(nil) is not nil")
	}
}
