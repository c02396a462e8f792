package slotctl_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/walbox/walbox/slotctl"
)

func TestEnsurePublication(t *testing.T) {
	outbox := slotctl.TableName{Schema: "public", Name: "outbox"}
	tests := []struct {
		name     string
		setup    []string // SQL run as the superuser after 001_outbox.sql
		migrate  string   // a further migration, applied after setup
		role     string   // connect as; default postgres
		cfg      slotctl.Config
		minMajor int
		withSlot bool // a pgoutput slot exists, named after the database (cfg.Slot is set to it)
		wantErr  error
		wantText []string
		wantNot  []string                 // advice the error must not give
		wantNone bool                     // no publication may exist afterwards
		wantPub  *slotctl.PublicationInfo // checked when no error is expected (Name, OID, Owner ignored)
	}{
		{
			name: "creates a missing one", cfg: slotctl.Config{CreateMissing: true},
			wantPub: &slotctl.PublicationInfo{Insert: true, Tables: []slotctl.TableName{outbox}},
		},
		{
			name: "missing without CreateMissing", cfg: slotctl.Config{},
			wantErr: slotctl.ErrPublicationNotFound, wantText: []string{`"walbox"`, "slotctl create", "002_publication.sql"},
		},
		{
			name: "accepts the one of 002_publication.sql", migrate: "002_publication.sql",
			wantPub: &slotctl.PublicationInfo{Insert: true, Tables: []slotctl.TableName{outbox}},
		},
		{
			name:    "accepts extra operations",
			setup:   []string{"CREATE PUBLICATION walbox FOR TABLE public.outbox"},
			wantPub: &slotctl.PublicationInfo{Insert: true, Update: true, Delete: true, Truncate: true, Tables: []slotctl.TableName{outbox}},
		},
		{
			name: "custom names", cfg: slotctl.Config{Table: "Sales.Events", Publication: "Sales_Pub", CreateMissing: true},
			setup:   []string{`CREATE SCHEMA "Sales"`, `CREATE TABLE "Sales"."Events" (id int)`},
			wantPub: &slotctl.PublicationInfo{Insert: true, Tables: []slotctl.TableName{{Schema: "Sales", Name: "Events"}}},
		},
		{
			name:     "rejects another table",
			setup:    []string{"CREATE TABLE other (id int)", "CREATE PUBLICATION walbox FOR TABLE other WITH (publish = 'insert')"},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"does not include public.outbox", "also publishes public.other", `ALTER PUBLICATION "walbox" SET TABLE "public"."outbox"`, "--publication"},
		},
		{
			name:     "rejects an extra table",
			setup:    []string{"CREATE TABLE other (id int)", "CREATE PUBLICATION walbox FOR TABLE outbox, other WITH (publish = 'insert')"},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"also publishes public.other", "SET TABLE"},
		},
		{
			// It used to advise DROP PUBLICATION and recreating it, which
			// another consumer of the publication may not survive.
			name:     "rejects FOR ALL TABLES",
			setup:    []string{"CREATE PUBLICATION walbox FOR ALL TABLES"},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"FOR ALL TABLES", `CREATE PUBLICATION "walbox_2" FOR TABLE "public"."outbox" WITH (publish = 'insert')`, "--publication walbox_2"},
			wantNot:  []string{"DROP PUBLICATION"},
		},
		{
			// Issue 7 item 4: it used to advise DROP PUBLICATION and
			// recreating it while the slot lived, which on PostgreSQL 14-17
			// breaks streaming until the slot is dropped.
			name:     "FOR ALL TABLES under a live slot advises a new slot",
			setup:    []string{"CREATE PUBLICATION walbox FOR ALL TABLES"},
			withSlot: true,
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"under the live slot", "NEW slot", `CREATE PUBLICATION "walbox_2"`, "--publication walbox_2 --slot ", "slotctl drop --slot "},
			wantNot:  []string{"DROP PUBLICATION"},
		},
		{
			// Issue 7 item 4: the publication was created again under the
			// existing slot (no error), which breaks streaming on 14-17.
			name: "never creates the publication under a live slot", cfg: slotctl.Config{CreateMissing: true},
			withSlot: true,
			wantErr:  slotctl.ErrPublicationNotFound,
			wantText: []string{`publication "walbox" does not exist but slot`, "publication does not exist", "NEW publication with a NEW slot", "--publication walbox_2 --slot ", "slotctl drop --slot "},
			wantNot:  []string{"slotctl create"},
			wantNone: true,
		},
		{
			name: "nor on a first start", cfg: slotctl.Config{CreateOnFirstStart: true},
			withSlot: true,
			wantErr:  slotctl.ErrPublicationNotFound,
			wantText: []string{"NEW publication with a NEW slot"},
			wantNone: true,
		},
		{
			name: "creates a missing one on a first start", cfg: slotctl.Config{CreateOnFirstStart: true},
			wantPub: &slotctl.PublicationInfo{Insert: true, Tables: []slotctl.TableName{outbox}},
		},
		{
			name:     "rejects one without inserts",
			setup:    []string{"CREATE PUBLICATION walbox FOR TABLE outbox WITH (publish = 'update, delete')"},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"does not publish inserts", `ALTER PUBLICATION "walbox" SET (publish = 'insert')`},
		},
		{
			name: "rejects a row filter", minMajor: 15,
			setup:    []string{"CREATE PUBLICATION walbox FOR TABLE outbox WHERE (event_type <> 'secret') WITH (publish = 'insert')"},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"WHERE clause"},
		},
		{
			name: "rejects a column list", minMajor: 15,
			setup:    []string{"CREATE PUBLICATION walbox FOR TABLE outbox (id, payload) WITH (publish = 'insert')"},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"only some columns"},
		},
		{
			name: "creates a partitioned one via the root", cfg: slotctl.Config{Table: "parted", CreateMissing: true},
			setup: []string{
				"CREATE TABLE parted (id int, created_at date) PARTITION BY RANGE (created_at)",
				"CREATE TABLE parted_2025 PARTITION OF parted FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')",
			},
			wantPub: &slotctl.PublicationInfo{Insert: true, ViaRoot: true, Tables: []slotctl.TableName{{Schema: "public", Name: "parted"}}},
		},
		{
			name: "rejects partitions published under their own names", cfg: slotctl.Config{Table: "parted"},
			setup: []string{
				"CREATE TABLE parted (id int, created_at date) PARTITION BY RANGE (created_at)",
				"CREATE TABLE parted_2025 PARTITION OF parted FOR VALUES FROM ('2025-01-01') TO ('2026-01-01')",
				"CREATE PUBLICATION walbox FOR TABLE parted WITH (publish = 'insert')",
			},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"publish_via_partition_root = true"},
		},
		{
			name: "role that does not own the table", role: "walbox", migrate: "003_walbox_role.sql",
			cfg:      slotctl.Config{CreateMissing: true},
			wantErr:  slotctl.ErrPublicationPrivilege,
			wantText: []string{"migrations/002_publication.sql", "42501"},
		},
		{
			name: "missing table", cfg: slotctl.Config{Table: "nope", CreateMissing: true},
			wantErr: slotctl.ErrTableNotFound,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, "001_outbox.sql")
			if e.srv.MajorVersion() < tt.minMajor {
				t.Skipf("needs PostgreSQL %d", tt.minMajor)
			}
			e.exec(t, tt.setup...)
			if tt.migrate != "" {
				e.migrate(t, tt.migrate)
			}
			conn := e.conn
			if tt.role != "" {
				conn = e.connectAs(t, tt.role)
			}
			if tt.withSlot {
				e.exec(t, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s', 'pgoutput')", e.db))
				tt.cfg.Slot = e.db
			}
			err := slotctl.EnsurePublication(ctxT(t), conn, tt.cfg)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("EnsurePublication() = %v, want %v", err, tt.wantErr)
				}
				for _, s := range tt.wantText {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				for _, s := range tt.wantNot {
					if strings.Contains(err.Error(), s) {
						t.Errorf("error %q advises %q", err, s)
					}
				}
				if tt.wantNone {
					name := tt.cfg.WithDefaults().Publication
					if _, err := slotctl.InspectPublication(ctxT(t), e.conn, name); !errors.Is(err, slotctl.ErrPublicationNotFound) {
						t.Errorf("publication %q exists after the refusal (%v)", name, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("EnsurePublication() = %v, want nil", err)
			}
			name := tt.cfg.WithDefaults().Publication
			got, err := slotctl.InspectPublication(ctxT(t), e.conn, name)
			if err != nil {
				t.Fatal(err)
			}
			want := *tt.wantPub
			want.Name, want.OID, want.Owner = name, got.OID, got.Owner
			if got.Name != want.Name || got.AllTables != want.AllTables || got.Insert != want.Insert ||
				got.Update != want.Update || got.Delete != want.Delete || got.Truncate != want.Truncate ||
				got.ViaRoot != want.ViaRoot || !slices.Equal(got.Tables, want.Tables) {
				t.Errorf("publication = %+v\nwant %+v", got, want)
			}
			// Idempotent: a second call accepts what the first left.
			if err := slotctl.EnsurePublication(ctxT(t), conn, tt.cfg); err != nil {
				t.Errorf("second EnsurePublication() = %v", err)
			}
		})
	}
}

func TestDropPublication(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql", "002_publication.sql", "003_walbox_role.sql")
	ctx := ctxT(t)
	if err := slotctl.DropPublication(ctx, e.connectAs(t, "walbox"), "walbox"); !errors.Is(err, slotctl.ErrPublicationPrivilege) {
		t.Errorf("DropPublication() by a non-owner = %v, want ErrPublicationPrivilege", err)
	}
	if err := slotctl.DropPublication(ctx, e.conn, "walbox"); err != nil {
		t.Fatalf("DropPublication() = %v", err)
	}
	if _, err := slotctl.InspectPublication(ctx, e.conn, "walbox"); !errors.Is(err, slotctl.ErrPublicationNotFound) {
		t.Errorf("InspectPublication() after drop = %v, want ErrPublicationNotFound", err)
	}
	if err := slotctl.DropPublication(ctx, e.conn, "walbox"); !errors.Is(err, slotctl.ErrPublicationNotFound) {
		t.Errorf("second DropPublication() = %v, want ErrPublicationNotFound", err)
	}
}
