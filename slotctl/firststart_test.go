package slotctl_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/walbox/walbox/slotctl"
)

// TestFirstStart covers how `walbox run` (CreateOnFirstStart) tells a first
// start, including one interrupted by a crash, from a vanished slot.
// Before issue 7, walbox created a missing slot on every start, so the
// "vanished" cases returned a brand-new slot at "now" and the events
// committed since the old slot's position were never sent.
func TestFirstStart(t *testing.T) {
	tests := []struct {
		name string
		// setup runs after 001_outbox.sql; slot is the slot's name.
		setup    func(t *testing.T, e env, slot string)
		cfg      slotctl.Config // Slot is set to the database's name
		wantErr  error
		wantText []string
		// wantComment is the publication's comment afterwards.
		wantComment string
	}{
		{
			name: "nothing exists: creates both",
			cfg:  slotctl.Config{CreateOnFirstStart: true},
		},
		{
			// The process died after creating the publication (with its
			// marker, in one transaction) and before creating the slot.
			name: "crash before the slot was created",
			setup: func(t *testing.T, e env, slot string) {
				e.exec(t, "CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')",
					fmt.Sprintf("COMMENT ON PUBLICATION walbox IS 'walbox: slot %s pending'", slot))
			},
			cfg: slotctl.Config{CreateOnFirstStart: true},
		},
		{
			name: "crash before the slot was created, publication made by CreatePublication",
			setup: func(t *testing.T, e env, slot string) {
				if err := slotctl.CreatePublication(ctxT(t), e.conn, slotctl.Config{Slot: slot}); err != nil {
					t.Fatal(err)
				}
			},
			cfg: slotctl.Config{CreateOnFirstStart: true},
		},
		{
			// The process died after creating the slot and before clearing
			// the marker: the next start only clears it.
			name: "crash before the marker was cleared",
			setup: func(t *testing.T, e env, slot string) {
				e.exec(t, "CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')",
					fmt.Sprintf("COMMENT ON PUBLICATION walbox IS 'walbox: slot %s pending'", slot),
					fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot))
			},
			cfg: slotctl.Config{CreateOnFirstStart: true},
		},
		{
			name: "slot vanished from under an existing publication",
			setup: func(t *testing.T, e env, slot string) {
				e.migrate(t, "002_publication.sql")
			},
			cfg:     slotctl.Config{CreateOnFirstStart: true},
			wantErr: slotctl.ErrSlotVanished,
			wantText: []string{`slot "{slot}" does not exist, but publication "walbox" does`, "failover", "dropped it",
				"were NOT streamed", "--create-slot", "slotctl create --slot {slot}", "re-publish", "event_id",
				`DELETE FROM "public"."outbox"`, "002_publication.sql"},
		},
		{
			name: "a pending marker of another slot does not count",
			setup: func(t *testing.T, e env, slot string) {
				e.exec(t, "CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')",
					"COMMENT ON PUBLICATION walbox IS 'walbox: slot other pending'")
			},
			cfg:         slotctl.Config{CreateOnFirstStart: true},
			wantErr:     slotctl.ErrSlotVanished,
			wantText:    []string{"pending for another slot"},
			wantComment: "walbox: slot other pending",
		},
		{
			name: "--create-slot creates it anyway",
			setup: func(t *testing.T, e env, slot string) {
				e.migrate(t, "002_publication.sql")
			},
			cfg: slotctl.Config{CreateOnFirstStart: true, CreateMissing: true},
		},
		{
			name: "an operator's comment is left alone",
			setup: func(t *testing.T, e env, slot string) {
				e.exec(t, "CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')",
					"COMMENT ON PUBLICATION walbox IS 'orders outbox, team payments'",
					fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", slot))
			},
			cfg:         slotctl.Config{CreateOnFirstStart: true},
			wantComment: "orders outbox, team payments",
		},
		{
			name: "verify-only mode still says not found",
			setup: func(t *testing.T, e env, slot string) {
				e.migrate(t, "002_publication.sql")
			},
			wantErr: slotctl.ErrSlotNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, "001_outbox.sql")
			ctx := ctxT(t)
			if tt.setup != nil {
				tt.setup(t, e, e.db)
			}
			cfg := tt.cfg
			cfg.Slot = e.db
			_, slot, err := slotctl.Ensure(ctx, e.conn, cfg)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("Ensure() = %v, want %v", err, tt.wantErr)
				}
				for _, s := range tt.wantText {
					if s = strings.ReplaceAll(s, "{slot}", e.db); !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				if _, err := slotctl.Inspect(ctx, e.conn, e.db); !errors.Is(err, slotctl.ErrSlotNotFound) {
					t.Errorf("a slot exists after the refusal (%v)", err)
				}
			} else if err != nil {
				t.Fatalf("Ensure() = %v", err)
			} else if slot.Name != e.db {
				t.Errorf("Ensure() returned slot %+v", slot)
			}
			if got := publicationComment(t, e); got != tt.wantComment {
				t.Errorf("publication comment = %q, want %q", got, tt.wantComment)
			}
		})
	}
}

// TestFirstStartThenVanished is the sequence at the library level:
// a first start, the slot dropped, a restart refused.
func TestFirstStartThenVanished(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql")
	ctx := ctxT(t)
	cfg := slotctl.Config{Slot: e.db, CreateOnFirstStart: true}
	if _, _, err := slotctl.Ensure(ctx, e.conn, cfg); err != nil {
		t.Fatalf("first start: %v", err)
	}
	if _, _, err := slotctl.Ensure(ctx, e.conn, cfg); err != nil {
		t.Fatalf("second start: %v", err)
	}
	if err := slotctl.DropSlot(ctx, e.conn, e.db); err != nil {
		t.Fatal(err)
	}
	if _, _, err := slotctl.Ensure(ctx, e.conn, cfg); !errors.Is(err, slotctl.ErrSlotVanished) {
		t.Fatalf("start after the slot was dropped: %v, want ErrSlotVanished", err)
	}
}

func publicationComment(t *testing.T, e env) string {
	t.Helper()
	var c string
	if err := e.conn.QueryRow(ctxT(t), `SELECT COALESCE(obj_description(oid, 'pg_publication'), '')
		FROM pg_publication WHERE pubname = 'walbox'`).Scan(&c); err != nil {
		t.Fatalf("read the publication's comment: %v", err)
	}
	return c
}

// TestFirstStartConcurrent: walboxes starting at once on a fresh database
// all succeed with the same slot; none mistakes another's half-done first
// start for a vanished slot.
func TestFirstStartConcurrent(t *testing.T) {
	for round := range 3 {
		t.Run(fmt.Sprint(round), func(t *testing.T) {
			e := newEnv(t, nil, "001_outbox.sql")
			const n = 3
			errs := make(chan error, n)
			for range n {
				go func() {
					_, _, err := slotctl.Setup(ctxT(t), e.srv.DSN(e.db), slotctl.Config{Slot: e.db, CreateOnFirstStart: true}, slotctl.SetupOptions{})
					errs <- err
				}()
			}
			for range n {
				if err := <-errs; err != nil {
					t.Errorf("concurrent first start: %v", err)
				}
			}
			if got := publicationComment(t, e); got != "" {
				t.Errorf("publication comment = %q after the first start, want none", got)
			}
		})
	}
}

// TestFirstStartMarkerOfAnotherOwner: a first start the table's owner
// began (publication with the marker) and the walbox role finishes creates
// the slot but cannot clear the marker; it says who must, rather than
// leaving a marker that would let a vanished slot be replaced unnoticed.
func TestFirstStartMarkerOfAnotherOwner(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "003_walbox_role.sql")
	ctx := ctxT(t)
	if err := slotctl.CreatePublication(ctx, e.conn, slotctl.Config{Slot: e.db}); err != nil {
		t.Fatal(err)
	}
	cfg := slotctl.Config{Slot: e.db, CreateOnFirstStart: true}
	_, _, err := slotctl.Ensure(ctx, e.connectAs(t, "walbox"), cfg)
	if !errors.Is(err, slotctl.ErrPublicationPrivilege) || !strings.Contains(err.Error(), `COMMENT ON PUBLICATION "walbox" IS NULL`) {
		t.Fatalf("Ensure() as walbox = %v, want ErrPublicationPrivilege naming the COMMENT to run", err)
	}
	// Once the owner has cleared it (here: by running Ensure), walbox starts.
	if _, _, err := slotctl.Ensure(ctx, e.conn, cfg); err != nil {
		t.Fatalf("Ensure() as the owner = %v", err)
	}
	if _, _, err := slotctl.Ensure(ctx, e.connectAs(t, "walbox"), cfg); err != nil {
		t.Fatalf("Ensure() as walbox after the owner cleared the marker = %v", err)
	}
}
