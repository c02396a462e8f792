package main

import (
	"io"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantEvents int
		wantDur    time.Duration
		wantLarge  string
		wantErr    bool
	}{
		{name: "defaults", wantEvents: 1_000_000, wantDur: time.Minute, wantLarge: "250000,1000000"},
		{name: "quick", args: []string{"--quick"}, wantEvents: 50_000, wantDur: 10 * time.Second, wantLarge: "25000,100000"},
		{
			// An explicit size wins over --quick's.
			name: "quick with explicit events", args: []string{"--quick", "--events", "2000"},
			wantEvents: 2000, wantDur: 10 * time.Second, wantLarge: "25000,100000",
		},
		{name: "backlog smaller than a transaction", args: []string{"--events", "10"}, wantErr: true},
		{name: "stray argument", args: []string{"run"}, wantErr: true},
		{name: "zero rate", args: []string{"--rate", "0"}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parse(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parse(%v) error = %v, wantErr %v", tt.args, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if o.events != tt.wantEvents || o.duration != tt.wantDur || o.largeTxn != tt.wantLarge {
				t.Errorf("parse(%v) = events %d, duration %s, large %s; want %d, %s, %s",
					tt.args, o.events, o.duration, o.largeTxn, tt.wantEvents, tt.wantDur, tt.wantLarge)
			}
		})
	}
}

// TestParseStreamingScenarios checks the sizes of the foreign-update and
// large-live scenarios: the 3,000,000-row UPDATE and 500,000-row
// transaction by default, smaller with --quick, an explicit size winning.
func TestParseStreamingScenarios(t *testing.T) {
	tests := []struct {
		name        string
		args        []string
		wantForeign int
		wantLive    string
		wantErr     bool
	}{
		{name: "defaults", wantForeign: 3_000_000, wantLive: "500000"},
		{name: "quick", args: []string{"--quick"}, wantForeign: 300_000, wantLive: "50000"},
		{name: "explicit wins over quick", args: []string{"--quick", "--foreign-rows", "20000", "--large-live", "20000"}, wantForeign: 20000, wantLive: "20000"},
		{name: "zero foreign rows", args: []string{"--foreign-rows", "0"}, wantErr: true},
		{name: "unknown scenario", args: []string{"--scenarios", "backlog,foreign"}, wantErr: true},
		{name: "only the new scenarios", args: []string{"--scenarios", "foreign-update,large-live"}, wantForeign: 3_000_000, wantLive: "500000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parse(tt.args, io.Discard)
			if (err != nil) != tt.wantErr {
				t.Fatalf("parse(%v) error = %v, wantErr %v", tt.args, err, tt.wantErr)
			}
			if !tt.wantErr && (o.foreignRows != tt.wantForeign || o.largeLive != tt.wantLive) {
				t.Errorf("parse(%v) = foreign rows %d, large-live %q; want %d, %q", tt.args, o.foreignRows, o.largeLive, tt.wantForeign, tt.wantLive)
			}
		})
	}
}

func TestInts(t *testing.T) {
	got, err := ints("large-txn", "25_000, 100000")
	if err != nil || len(got) != 2 || got[0] != 25000 || got[1] != 100000 {
		t.Errorf("ints = %v, %v; want [25000 100000]", got, err)
	}
	if _, err := ints("large-txn", "10,-1"); err == nil {
		t.Error("ints accepted a negative size")
	}
}
