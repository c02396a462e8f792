package slotctl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/slotctl"
)

// TestCheck: Check reports what Ensure would refuse, all at once, and
// what it would create, and changes nothing.
func TestCheck(t *testing.T) {
	tests := []struct {
		name string
		// setup runs as the superuser after migrations/001_outbox.sql;
		// {slot} is the test's slot (its database's name).
		setup   []string
		cfg     slotctl.Config // Table, Slot and Publication are filled in
		wantPub bool           // Plan.CreatePublication
		wantSlt bool           // Plan.CreateSlot
		wantErr []error
	}{
		{name: "first start", cfg: slotctl.Config{CreateOnFirstStart: true}, wantPub: true, wantSlt: true},
		{name: "nothing may be created", wantErr: []error{slotctl.ErrPublicationNotFound, slotctl.ErrSlotNotFound}},
		{name: "admin-made publication, first start", setup: []string{`CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')`},
			cfg: slotctl.Config{CreateOnFirstStart: true}, wantErr: []error{slotctl.ErrSlotVanished}},
		{name: "admin-made publication, create-slot", setup: []string{`CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')`},
			cfg: slotctl.Config{CreateOnFirstStart: true, CreateMissing: true}, wantSlt: true},
		{name: "interrupted first start", setup: []string{`CREATE PUBLICATION walbox FOR TABLE public.outbox WITH (publish = 'insert')`,
			`COMMENT ON PUBLICATION walbox IS 'walbox: slot {slot} pending'`},
			cfg: slotctl.Config{CreateOnFirstStart: true}, wantSlt: true},
		{name: "slot without its publication", setup: []string{`SELECT pg_create_logical_replication_slot('{slot}', 'pgoutput')`},
			cfg: slotctl.Config{CreateOnFirstStart: true}, wantErr: []error{slotctl.ErrPublicationNotFound}},
		{name: "publication of another table and a slot of another plugin at once",
			setup: []string{`CREATE TABLE public.other (id int)`, `CREATE PUBLICATION walbox FOR TABLE public.other`,
				`SELECT pg_create_logical_replication_slot('{slot}', 'test_decoding')`},
			cfg: slotctl.Config{CreateOnFirstStart: true}, wantErr: []error{slotctl.ErrPublicationMismatch, slotctl.ErrSlotMismatch}},
		{name: "missing table", setup: []string{`DROP TABLE public.outbox`},
			cfg: slotctl.Config{CreateOnFirstStart: true}, wantPub: true, wantSlt: true, wantErr: []error{slotctl.ErrTableNotFound}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, "001_outbox.sql")
			for _, s := range tt.setup {
				e.exec(t, strings.ReplaceAll(s, "{slot}", e.db))
			}
			cfg := tt.cfg
			cfg.Table, cfg.Slot, cfg.Publication = "public.outbox", e.db, "walbox"
			var pubsBefore, slotsBefore int
			_ = e.conn.QueryRow(ctxT(t), `SELECT (SELECT count(*) FROM pg_publication), (SELECT count(*) FROM pg_replication_slots)`).Scan(&pubsBefore, &slotsBefore)

			plan, err := slotctl.Check(ctxT(t), e.conn, cfg)
			for _, w := range tt.wantErr {
				if !errors.Is(err, w) {
					t.Errorf("Check() = %v, want it to wrap %v", err, w)
				}
			}
			if len(tt.wantErr) == 0 && err != nil {
				t.Errorf("Check() = %v, want no problem", err)
			}
			if plan.CreatePublication != tt.wantPub || plan.CreateSlot != tt.wantSlt {
				t.Errorf("plan creates publication %t, slot %t; want %t, %t", plan.CreatePublication, plan.CreateSlot, tt.wantPub, tt.wantSlt)
			}
			var pubs, slots int
			_ = e.conn.QueryRow(ctxT(t), `SELECT (SELECT count(*) FROM pg_publication), (SELECT count(*) FROM pg_replication_slots)`).Scan(&pubs, &slots)
			if pubs != pubsBefore || slots != slotsBefore {
				t.Errorf("Check changed the server: publications %d -> %d, slots %d -> %d", pubsBefore, pubs, slotsBefore, slots)
			}
			// Ensure refuses what Check reports, and only that.
			_, _, eerr := slotctl.Ensure(ctxT(t), e.conn, cfg)
			if (eerr != nil) != (err != nil) {
				t.Errorf("Ensure() = %v, Check() = %v: they disagree", eerr, err)
			}
		})
	}
}
