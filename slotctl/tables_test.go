package slotctl_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/walbox/walbox/slotctl"
)

// Several outbox tables in one publication and slot (issue 10: Debezium's
// table.include.list), and the publication policies of Debezium's
// publication.autocreate.mode (OtherTablesOK, NoCreatePublication).
func TestSeveralTables(t *testing.T) {
	outbox := slotctl.TableName{Schema: "public", Name: "outbox"}
	billing := slotctl.TableName{Schema: "billing", Name: "outbox"}
	two := "public.outbox, billing.outbox"
	tests := []struct {
		name     string
		setup    []string
		cfg      slotctl.Config
		wantErr  error
		wantText []string
		wantPub  []slotctl.TableName // tables of the publication afterwards, when no error
	}{
		{
			name: "creates one publication for both", cfg: slotctl.Config{Table: two, CreateMissing: true},
			wantPub: []slotctl.TableName{billing, outbox},
		},
		{
			name:    "accepts one that publishes both",
			setup:   []string{"CREATE PUBLICATION walbox FOR TABLE public.outbox, billing.outbox"},
			cfg:     slotctl.Config{Table: two},
			wantPub: []slotctl.TableName{billing, outbox},
		},
		{
			name:     "names the table missing from it",
			setup:    []string{"CREATE PUBLICATION walbox FOR TABLE public.outbox"},
			cfg:      slotctl.Config{Table: two},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"does not include billing.outbox", `SET TABLE "public"."outbox", "billing"."outbox"`},
		},
		{
			name:     "a missing table among them",
			cfg:      slotctl.Config{Table: "public.outbox, billing.nope", CreateMissing: true},
			wantErr:  slotctl.ErrTableNotFound,
			wantText: []string{"billing.nope"},
		},
		{
			name:    "other tables accepted when asked (Debezium all_tables)",
			setup:   []string{"CREATE TABLE other (id int)", "CREATE PUBLICATION walbox FOR TABLE public.outbox, billing.outbox, other"},
			cfg:     slotctl.Config{Table: two, OtherTablesOK: true},
			wantPub: []slotctl.TableName{billing, outbox, {Schema: "public", Name: "other"}},
		},
		{
			name:  "FOR ALL TABLES accepted when asked",
			setup: []string{"CREATE PUBLICATION walbox FOR ALL TABLES"},
			cfg:   slotctl.Config{Table: two, OtherTablesOK: true},
		},
		{
			name:     "other tables accepted, ours still required",
			setup:    []string{"CREATE TABLE other (id int)", "CREATE PUBLICATION walbox FOR TABLE public.outbox, other"},
			cfg:      slotctl.Config{Table: two, OtherTablesOK: true},
			wantErr:  slotctl.ErrPublicationMismatch,
			wantText: []string{"does not include billing.outbox", `ADD TABLE "billing"."outbox"`},
		},
		{
			name:     "never created when told so (Debezium disabled)",
			cfg:      slotctl.Config{Table: two, CreateMissing: true, NoCreatePublication: true},
			wantErr:  slotctl.ErrPublicationNotFound,
			wantText: []string{"autocreate.mode", `CREATE PUBLICATION "walbox" FOR TABLE "public"."outbox", "billing"."outbox"`},
		},
		{
			name:     "a duplicate in the list",
			cfg:      slotctl.Config{Table: "public.outbox,outbox", CreateMissing: true},
			wantErr:  slotctl.ErrInvalidConfig,
			wantText: []string{"twice"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, nil, "001_outbox.sql")
			e.exec(t, "CREATE SCHEMA billing", "CREATE TABLE billing.outbox (LIKE public.outbox INCLUDING ALL)")
			e.exec(t, tt.setup...)
			err := slotctl.EnsurePublication(ctxT(t), e.conn, tt.cfg)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("EnsurePublication() = %v, want %v", err, tt.wantErr)
				}
				for _, s := range tt.wantText {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not mention %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatalf("EnsurePublication() = %v", err)
			}
			if tt.wantPub != nil {
				got, err := slotctl.InspectPublication(ctxT(t), e.conn, "walbox")
				if err != nil {
					t.Fatal(err)
				}
				want := slices.Clone(tt.wantPub)
				slices.SortFunc(want, func(a, b slotctl.TableName) int { return strings.Compare(a.String(), b.String()) })
				if !slices.Equal(got.Tables, want) {
					t.Errorf("tables = %v, want %v", got.Tables, want)
				}
			}
		})
	}
}

// Preflight checks the columns of every outbox table.
func TestPreflightSeveralTables(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql")
	e.exec(t, "CREATE SCHEMA billing", "CREATE TABLE billing.outbox (id uuid, payload jsonb)")
	var checked []string
	cfg := slotctl.Config{Table: "public.outbox,billing.outbox", Columns: columnsFunc(func(table string, cols []string) error {
		checked = append(checked, table)
		if !slices.Contains(cols, "aggregate_id") {
			return fmt.Errorf("%s lacks aggregate_id", table)
		}
		return nil
	})}
	_, err := slotctl.Preflight(ctxT(t), e.conn, cfg)
	if err == nil || !strings.Contains(err.Error(), "billing.outbox lacks aggregate_id") {
		t.Errorf("Preflight() = %v, want the column problem of billing.outbox", err)
	}
	if !slices.Equal(checked, []string{"public.outbox", "billing.outbox"}) {
		t.Errorf("checked %v", checked)
	}
}

type columnsFunc func(table string, columns []string) error

func (f columnsFunc) CheckColumns(table string, columns []string) error { return f(table, columns) }

// Ensure sets up one slot for two tables, and a second run accepts it.
func TestEnsureSeveralTables(t *testing.T) {
	e := newEnv(t, nil, "001_outbox.sql")
	e.exec(t, "CREATE SCHEMA billing", "CREATE TABLE billing.outbox (LIKE public.outbox INCLUDING ALL)")
	cfg := slotctl.Config{Table: "public.outbox,billing.outbox", Slot: e.db, CreateOnFirstStart: true}
	for i := range 2 {
		if _, slot, err := slotctl.Ensure(ctxT(t), e.conn, cfg); err != nil || slot.Name != e.db {
			t.Fatalf("Ensure() #%d = %+v, %v", i+1, slot, err)
		}
	}
}
