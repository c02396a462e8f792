package slotctl_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/slotctl"
)

func TestConfigValidate(t *testing.T) {
	long := strings.Repeat("a", 64)
	tests := []struct {
		name    string
		cfg     slotctl.Config
		wantErr string // substring; "" means valid
	}{
		{name: "zero value means defaults", cfg: slotctl.Config{}},
		{name: "table without schema", cfg: slotctl.Config{Table: "events"}},
		{name: "mixed case is kept", cfg: slotctl.Config{Table: "Sales.Outbox", Publication: "Walbox_Pub"}},
		{name: "three parts", cfg: slotctl.Config{Table: "a.b.c"}, wantErr: "dot"},
		{name: "empty table part", cfg: slotctl.Config{Table: "public."}, wantErr: "empty"},
		{name: "quoted table", cfg: slotctl.Config{Table: `public."Outbox"`}, wantErr: "without quotes"},
		{name: "table too long", cfg: slotctl.Config{Table: long}, wantErr: "64 bytes"},
		{name: "control character", cfg: slotctl.Config{Table: "out\nbox"}, wantErr: "character"},
		{name: "upper-case slot", cfg: slotctl.Config{Slot: "Walbox"}, wantErr: `slot "Walbox"`},
		{name: "dash in slot", cfg: slotctl.Config{Slot: "wal-box"}, wantErr: "a-z, 0-9 and _"},
		{name: "slot too long", cfg: slotctl.Config{Slot: long}, wantErr: "1 to 63"},
		{name: "63-byte slot", cfg: slotctl.Config{Slot: long[:63]}},
		{name: "quoted publication", cfg: slotctl.Config{Publication: `"walbox"`}, wantErr: "publication"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, slotctl.ErrInvalidConfig) {
				t.Fatalf("Validate() = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Validate() = %q, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseTableName(t *testing.T) {
	tests := []struct {
		in   string
		want slotctl.TableName
		sql  string
	}{
		{"outbox", slotctl.TableName{Schema: "public", Name: "outbox"}, `"public"."outbox"`},
		{"sales.Outbox", slotctl.TableName{Schema: "sales", Name: "Outbox"}, `"sales"."Outbox"`},
		{"my schema.my table", slotctl.TableName{Schema: "my schema", Name: "my table"}, `"my schema"."my table"`},
		{"public.select", slotctl.TableName{Schema: "public", Name: "select"}, `"public"."select"`},
	}
	for _, tt := range tests {
		got, err := slotctl.ParseTableName(tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ParseTableName(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
			continue
		}
		if s := got.Sanitize(); s != tt.sql {
			t.Errorf("%+v.Sanitize() = %s, want %s", got, s, tt.sql)
		}
	}
}

func TestWithDefaults(t *testing.T) {
	got := slotctl.Config{CreateMissing: true}.WithDefaults()
	want := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if got != want {
		t.Errorf("WithDefaults() = %+v, want %+v", got, want)
	}
}
