package snapshot

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"
)

func TestParseMode(t *testing.T) {
	tests := []struct {
		in      string
		want    Mode
		wantErr bool
	}{
		{"", ModeNone, false},
		{"none", ModeNone, false},
		{" Pending ", ModePending, false},
		{"all", ModeAll, false},
		{"some", "", true},
	}
	for _, tt := range tests {
		got, err := ParseMode(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseMode(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
		if err != nil && !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("ParseMode(%q) error %v does not wrap ErrInvalidConfig", tt.in, err)
		}
	}
}

func TestCheckWhere(t *testing.T) {
	tests := []struct {
		name    string
		mode    Mode
		where   string
		wantErr string
	}{
		{"pending with a condition", ModePending, "sent_at IS NULL", ""},
		{"pending without one is refused: no guess of what pending means", ModePending, " ", "needs --snapshot-where"},
		{"all with a condition", ModeAll, "sent_at IS NULL", "used only with --snapshot pending"},
		{"none with a condition", ModeNone, "x", "used only with --snapshot pending"},
		{"none", ModeNone, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckWhere(tt.mode, tt.where)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("CheckWhere: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("CheckWhere error %v, want ErrInvalidConfig containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestParseOrder(t *testing.T) {
	tests := []struct {
		in, id  string
		want    string
		wantErr bool
	}{
		{"", "", `"id"`, false},
		{"", "event_id", `"event_id"`, false},
		{"created_at, id", "id", `"created_at", "id"`, false},
		{"Pos", "id", `"Pos"`, false},
		{"id DESC", "id", "", true},
		{`"id"`, "id", "", true},
		{"a,,b", "id", "", true},
	}
	for _, tt := range tests {
		cols, err := ParseOrder(tt.in, tt.id)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseOrder(%q) error %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil {
			if got := (Config{Order: cols}).orderBy(); got != tt.want {
				t.Errorf("ParseOrder(%q) orders by %s, want %s", tt.in, got, tt.want)
			}
		}
	}
}

func TestParseMarker(t *testing.T) {
	tests := []struct {
		comment string
		want    marker
	}{
		{"", marker{}},
		{"walbox: slot walbox pending", marker{}}, // the first start's marker is not a snapshot's
		{"walbox: slot walbox snapshot pending", marker{present: true}},
		{"walbox: slot walbox snapshot pending from 0/1A2B3C", marker{present: true, from: pglogrepl.LSN(0x1A2B3C)}},
		{"walbox: slot other snapshot pending", marker{}},
		{"walbox: slot walbox snapshot pending from garbage", marker{present: true}},
	}
	for _, tt := range tests {
		if got := parseMarker(tt.comment, "walbox"); got != tt.want {
			t.Errorf("parseMarker(%q) = %+v, want %+v", tt.comment, got, tt.want)
		}
	}
}
