package slotctl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

func TestPreflight(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "003_walbox_role.sql")
	norepl, noselect := e.db+"_norepl", e.db+"_nosel"
	e.exec(t,
		"CREATE ROLE "+norepl+" LOGIN",
		"GRANT SELECT ON public.outbox TO "+norepl,
		"CREATE ROLE "+noselect+" LOGIN REPLICATION",
		"CREATE VIEW outbox_view AS SELECT * FROM public.outbox",
		`CREATE SCHEMA "Sales"`,
		`CREATE TABLE "Sales"."Outbox" (id int)`,
	)

	tests := []struct {
		name     string
		role     string
		cfg      slotctl.Config
		wantErr  error
		wantText []string // substrings of the error: the value and the fix
	}{
		{name: "superuser on a good server", role: "postgres"},
		{name: "least-privilege role of 003_walbox_role.sql", role: "walbox"},
		{name: "case-sensitive table name", role: "postgres", cfg: slotctl.Config{Table: "Sales.Outbox"}},
		{
			name: "role without REPLICATION", role: norepl,
			wantErr:  slotctl.ErrNoReplicationPrivilege,
			wantText: []string{norepl, `ALTER ROLE "` + norepl + `" REPLICATION`},
		},
		{
			name: "role without SELECT", role: noselect,
			wantErr:  slotctl.ErrTableNotReadable,
			wantText: []string{noselect, `GRANT SELECT ON "public"."outbox"`},
		},
		{
			name: "missing table", role: "postgres", cfg: slotctl.Config{Table: "public.nope"},
			wantErr:  slotctl.ErrTableNotFound,
			wantText: []string{"public.nope", "migrations/001_outbox.sql", e.db},
		},
		{
			name: "folded name is not the table", role: "postgres", cfg: slotctl.Config{Table: "sales.outbox"},
			wantErr: slotctl.ErrTableNotFound,
		},
		{
			name: "view", role: "postgres", cfg: slotctl.Config{Table: "outbox_view"},
			wantErr:  slotctl.ErrTableNotFound,
			wantText: []string{"view"},
		},
		{
			name: "invalid config", role: "postgres", cfg: slotctl.Config{Slot: "Bad"},
			wantErr: slotctl.ErrInvalidConfig,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := e.connectAs(t, tt.role)
			info, err := slotctl.Preflight(ctxT(t), conn, tt.cfg)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Preflight() = %v, want nil", err)
				}
				if info.VersionNum < slotctl.MinVersionNum || info.WALLevel != "logical" || info.TableOID == 0 ||
					info.Database != e.db || info.User != tt.role || info.MaxReplicationSlots != 20 {
					t.Errorf("ServerInfo = %+v", info)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Preflight() = %v, want %v", err, tt.wantErr)
			}
			for _, s := range tt.wantText {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}

// TestPreflightMisconfiguredServer runs its own server, since wal_level and
// max_replication_slots only change with a restart. Every problem is
// reported at once.
func TestPreflightMisconfiguredServer(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t,
		pgtest.WithSetting("wal_level", "replica"),
		pgtest.WithSetting("max_replication_slots", "0"),
	)
	e := newEnv(t, srv, "001_outbox.sql")
	_, err := slotctl.Preflight(ctxT(t), e.conn, slotctl.Config{})
	for _, want := range []error{slotctl.ErrWALLevel, slotctl.ErrNoReplicationSlots} {
		if !errors.Is(err, want) {
			t.Errorf("Preflight() = %v, want it to wrap %v", err, want)
		}
	}
	for _, s := range []string{"wal_level = replica", "wal_level = logical", "ALTER SYSTEM SET wal_level = logical", "restart", "max_replication_slots = 0"} {
		if err != nil && !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}

	// Creating a slot regardless fails with a diagnosis, not a bare SQLSTATE
	// 55000 (which PostgreSQL uses for both problems).
	if _, err := slotctl.CreateSlot(ctxT(t), e.conn, "walbox"); !errors.Is(err, slotctl.ErrWALLevel) {
		t.Errorf("CreateSlot() on a replica-level server = %v, want ErrWALLevel", err)
	}
}
