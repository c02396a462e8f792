package slotctl_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

func TestEnsureSlot(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(t *testing.T, e env) // may create a slot named e.db
		create   bool                      // CreateMissing
		wantErr  error
		wantText []string
	}{
		{name: "creates a missing one", create: true},
		{
			name:    "missing without CreateMissing",
			wantErr: slotctl.ErrSlotNotFound, wantText: []string{"slotctl create"},
		},
		{
			name: "accepts an existing pgoutput slot",
			setup: func(t *testing.T, e env) {
				e.exec(t, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", e.db))
			},
		},
		{
			name: "rejects a test_decoding slot", create: true,
			setup: func(t *testing.T, e env) {
				e.exec(t, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'test_decoding')", e.db))
			},
			wantErr:  slotctl.ErrSlotMismatch,
			wantText: []string{`"test_decoding"`, `"pgoutput"`, "slotctl drop", "--slot"},
		},
		{
			name: "rejects a physical slot", create: true,
			setup: func(t *testing.T, e env) {
				e.exec(t, fmt.Sprintf("SELECT pg_create_physical_replication_slot('%s')", e.db))
				t.Cleanup(func() {
					_, _ = e.conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", e.db)
				})
			},
			wantErr:  slotctl.ErrSlotMismatch,
			wantText: []string{"physical"},
		},
		{
			name: "rejects a slot of another database", create: true,
			setup: func(t *testing.T, e env) {
				other := newEnv(t, e.srv)
				other.exec(t, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", e.db))
				t.Cleanup(func() {
					_, _ = other.conn.Exec(context.Background(), "SELECT pg_drop_replication_slot($1)", e.db)
				})
			},
			wantErr:  slotctl.ErrSlotMismatch,
			wantText: []string{"belongs to database"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql")
			if tt.setup != nil {
				tt.setup(t, e)
			}
			cfg := slotctl.Config{Slot: e.db, CreateMissing: tt.create}
			got, err := slotctl.EnsureSlot(ctxT(t), e.conn, cfg)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("EnsureSlot() = %v, want %v", err, tt.wantErr)
				}
				for _, s := range tt.wantText {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("EnsureSlot() = %v", err)
			}
			if got.Name != e.db || got.Plugin != "pgoutput" || got.SlotType != "logical" || got.Database != e.db ||
				got.Active || got.ActivePID != 0 || got.Temporary || got.ConfirmedFlushLSN == 0 || got.RestartLSN == 0 ||
				got.RestartLSN > got.ConfirmedFlushLSN || got.WALStatus != "reserved" || got.RetainedBytes < 0 {
				t.Errorf("SlotInfo = %+v", got)
			}
			again, err := slotctl.EnsureSlot(ctxT(t), e.conn, cfg)
			if err != nil || again.ConfirmedFlushLSN != got.ConfirmedFlushLSN {
				t.Errorf("second EnsureSlot() = %+v, %v; want the same slot", again, err)
			}
		})
	}
}

func TestInspectMissingSlot(t *testing.T) {
	e := newEnv(t, nil)
	if _, err := slotctl.Inspect(ctxT(t), e.conn, "no_such_slot"); !errors.Is(err, slotctl.ErrSlotNotFound) {
		t.Errorf("Inspect() = %v, want ErrSlotNotFound", err)
	}
	if _, err := slotctl.Inspect(ctxT(t), e.conn, "No-Such"); !errors.Is(err, slotctl.ErrInvalidConfig) {
		t.Errorf("Inspect(invalid name) = %v, want ErrInvalidConfig", err)
	}
}

func TestCreateSlotExists(t *testing.T) {
	e := newEnv(t, nil)
	ctx := ctxT(t)
	if _, err := slotctl.CreateSlot(ctx, e.conn, e.db); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.CreateSlot(ctx, e.conn, e.db); !errors.Is(err, slotctl.ErrSlotExists) {
		t.Errorf("second CreateSlot() = %v, want ErrSlotExists", err)
	}
}

// TestDropSlotRefusesActiveSlot holds the slot active with a real
// replication connection, as a running walbox would.
func TestDropSlotRefusesActiveSlot(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql")
	ctx := ctxT(t)
	if _, err := slotctl.CreateSlot(ctx, e.conn, e.db); err != nil {
		t.Fatal(err)
	}
	repl := startReplication(t, e, "postgres", e.db)

	info, err := slotctl.Inspect(ctx, e.conn, e.db)
	if err != nil || !info.Active || info.ActivePID == 0 {
		t.Fatalf("Inspect() while streaming = %+v, %v; want active with a pid", info, err)
	}
	err = slotctl.DropSlot(ctx, e.conn, e.db)
	if !errors.Is(err, slotctl.ErrSlotActive) {
		t.Fatalf("DropSlot() on an active slot = %v, want ErrSlotActive", err)
	}
	if !strings.Contains(err.Error(), fmt.Sprint(info.ActivePID)) {
		t.Errorf("error %q does not name the pid %d", err, info.ActivePID)
	}

	if err := repl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	waitInactive(t, e, e.db)
	if err := slotctl.DropSlot(ctx, e.conn, e.db); err != nil {
		t.Fatalf("DropSlot() after the consumer left = %v", err)
	}
	if err := slotctl.DropSlot(ctx, e.conn, e.db); !errors.Is(err, slotctl.ErrSlotNotFound) {
		t.Errorf("second DropSlot() = %v, want ErrSlotNotFound", err)
	}
}

// TestEnsureAsWalboxRole is the documented setup end to end: an admin
// applies the three migrations, then the least-privilege walbox role
// prepares everything else and can stream an insert.
func TestEnsureAsWalboxRole(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql", "003_walbox_role.sql")
	ctx := ctxT(t)
	cfg := slotctl.Config{Slot: e.db, CreateMissing: true}
	info, slot, err := slotctl.Ensure(ctx, e.connectAs(t, "walbox"), cfg)
	if err != nil {
		t.Fatalf("Ensure() as walbox = %v", err)
	}
	if info.User != "walbox" || info.Superuser || !info.Replication || slot.Plugin != "pgoutput" {
		t.Errorf("Ensure() = %+v, %+v", info, slot)
	}

	repl := startReplication(t, e, "walbox", e.db)
	e.exec(t, `INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload)
	           VALUES ('order', '42', 'OrderCreated', '{"total": 1}')`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		rctx, cancel := context.WithDeadline(ctx, deadline)
		msg, err := repl.ReceiveMessage(rctx)
		cancel()
		if err != nil {
			t.Fatalf("receive as walbox: %v", err)
		}
		if cd, ok := msg.(*pgproto3.CopyData); ok && len(cd.Data) > 0 && cd.Data[0] == pglogrepl.XLogDataByteID {
			return // the insert's transaction arrived
		}
	}
}

// TestEnsureSlotLost loses a slot's WAL on purpose: with
// max_slot_wal_keep_size tiny, a checkpoint after a few WAL segments
// invalidates the inactive slot.
func TestEnsureSlotLost(t *testing.T) {
	t.Parallel()
	srv := pgtest.Start(t, pgtest.WithSetting("max_slot_wal_keep_size", "1MB"))
	e := newEnv(t, srv, "001_outbox.sql", "002_publication.sql")
	ctx := ctxT(t)
	cfg := slotctl.Config{Slot: "walbox", CreateMissing: true}
	if _, err := slotctl.EnsureSlot(ctx, e.conn, cfg); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		e.exec(t, "INSERT INTO public.outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('a', 'b', 'c', '{}')",
			"SELECT pg_switch_wal()", "CHECKPOINT")
		info, err := slotctl.Inspect(ctx, e.conn, "walbox")
		if err != nil {
			t.Fatal(err)
		}
		if info.WALStatus == "lost" {
			break
		}
		if i == 20 {
			t.Fatalf("slot not lost after %d WAL switches: %+v", i, info)
		}
	}
	_, err := slotctl.EnsureSlot(ctx, e.conn, cfg)
	if !errors.Is(err, slotctl.ErrSlotLost) {
		t.Fatalf("EnsureSlot() on a lost slot = %v, want ErrSlotLost", err)
	}
	for _, s := range []string{"wal_status = lost", "slotctl drop", "re-publish"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
}

// startReplication opens a replication connection as role and streams the
// slot from its confirmed position; the slot is active until the returned
// connection closes (also at cleanup).
func startReplication(t *testing.T, e env, role, slot string) *pgconn.PgConn {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgconn.Connect(ctx, e.dsnAs(t, role)+"&replication=database")
	if err != nil {
		t.Fatalf("replication connection as %s: %v", role, err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	err = pglogrepl.StartReplication(ctx, conn, slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walbox'"},
	})
	if err != nil {
		t.Fatalf("START_REPLICATION as %s: %v", role, err)
	}
	return conn
}

// waitInactive waits until the server has noticed that a slot's consumer
// left: the walsender exits asynchronously after the client disconnects.
func waitInactive(t *testing.T, e env, slot string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		info, err := slotctl.Inspect(ctxT(t), e.conn, slot)
		if err != nil {
			t.Fatal(err)
		}
		if !info.Active {
			return
		}
	}
	t.Fatalf("slot %s still active 10s after its consumer disconnected", slot)
}
