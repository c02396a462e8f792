package pipeline

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/decoder"
)

func TestRangeContains(t *testing.T) {
	t1 := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	t2 := t1.Add(time.Hour)
	tests := []struct {
		name string
		r    Range
		lsn  pglogrepl.LSN
		at   time.Time
		want bool
	}{
		{name: "open range", lsn: 1, at: t1, want: true},
		{name: "at FromLSN (inclusive)", r: Range{FromLSN: 100, ToLSN: 200}, lsn: 100, at: t1, want: true},
		{name: "at ToLSN (inclusive)", r: Range{FromLSN: 100, ToLSN: 200}, lsn: 200, at: t1, want: true},
		{name: "just before FromLSN", r: Range{FromLSN: 100, ToLSN: 200}, lsn: 99, at: t1},
		{name: "just after ToLSN", r: Range{FromLSN: 100, ToLSN: 200}, lsn: 201, at: t1},
		{name: "at FromTime (inclusive)", r: Range{FromTime: t1, ToTime: t2}, lsn: 5, at: t1, want: true},
		{name: "at ToTime (inclusive)", r: Range{FromTime: t1, ToTime: t2}, lsn: 5, at: t2, want: true},
		{name: "a microsecond before FromTime", r: Range{FromTime: t1, ToTime: t2}, lsn: 5, at: t1.Add(-time.Microsecond)},
		{name: "a microsecond after ToTime", r: Range{FromTime: t1, ToTime: t2}, lsn: 5, at: t2.Add(time.Microsecond)},
		{name: "LSN from, time to: both must hold", r: Range{FromLSN: 100, ToTime: t2}, lsn: 150, at: t2.Add(time.Second)},
		{name: "only a lower bound", r: Range{FromLSN: 100}, lsn: 1 << 40, at: t2, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Contains(tt.lsn, tt.at); got != tt.want {
				t.Errorf("Contains(%s, %s) = %t, want %t", tt.lsn, tt.at, got, tt.want)
			}
		})
	}
}

func TestParseReplayBound(t *testing.T) {
	tests := []struct {
		in      string
		lsn     pglogrepl.LSN
		at      time.Time
		wantErr string
	}{
		{in: "16/B374D848", lsn: 0x16B374D848},
		{in: "0/0", lsn: 0},
		{in: " 0/15FD3D8 ", lsn: 0x15FD3D8},
		{in: "2026-11-30T22:00:00Z", at: time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)},
		{in: "2026-11-30T23:00:00.123456+01:00", at: time.Date(2026, 11, 30, 22, 0, 0, 123456000, time.UTC)},
		{in: "16/B374D848X", wantErr: "expected the form 16/B374D848"},
		{in: "16/", wantErr: "expected the form 16/B374D848"},
		{in: "G/1", wantErr: "expected the form 16/B374D848"},
		{in: "123456789/1", wantErr: "expected the form 16/B374D848"},
		{in: "yesterday", wantErr: "neither an LSN (expected the form 16/B374D848) nor an RFC 3339 time"},
		{in: "2026-11-30 22:00:00", wantErr: "RFC 3339"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			lsn, at, err := ParseReplayBound(tt.in)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrBadBound) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseReplayBound(%q) = %v, want ErrBadBound with %q", tt.in, err, tt.wantErr)
				}
				return
			}
			if err != nil || lsn != tt.lsn || !at.Equal(tt.at) {
				t.Errorf("ParseReplayBound(%q) = %s, %s, %v; want %s, %s", tt.in, lsn, at, err, tt.lsn, tt.at)
			}
		})
	}
}

// TestReplayEnd: the end of a replay is the range's upper LSN or the
// server's position at start (exclusive: nothing committing there had
// committed when the replay started); never a commit time, which WAL
// order does not follow.
func TestReplayEnd(t *testing.T) {
	to := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	r := &rangeReplay{end: 200, current: 300, cfg: ReplayConfig{Range: Range{ToTime: to}}}
	for _, tt := range []struct {
		lsn  pglogrepl.LSN
		want bool
	}{
		{150, false},
		{200, false},
		{201, true},
	} {
		if got := r.pastEnd(tt.lsn); got != tt.want {
			t.Errorf("pastEnd(%s) = %t, want %t", tt.lsn, got, tt.want)
		}
	}
	r = &rangeReplay{end: 300, current: 300}
	if !r.pastEnd(300) || r.pastEnd(299) {
		t.Error("a commit at the server's position at start must end the replay, one before it not")
	}
}

// TestCheckStart: a range beginning before the trailing slot's position is
// refused with the earliest LSN and, when a transaction was seen, its time.
func TestCheckStart(t *testing.T) {
	first := &decoder.Begin{CommitLSN: 120, CommitTime: time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)}
	for _, tt := range []struct {
		name    string
		rg      Range
		first   *decoder.Begin
		wantErr string
	}{
		{name: "LSN at the slot", rg: Range{FromLSN: 100}, first: first},
		{name: "LSN before the slot", rg: Range{FromLSN: 99}, first: first, wantErr: "at or after LSN 0/64: give --from 0/64 (or a later LSN) to replay from there; by time, the first of them committed at 2026-11-30T21:00:00Z"},
		{name: "LSN before the slot, no transaction", rg: Range{FromLSN: 99}, wantErr: "give --from 0/64 (or a later LSN) to replay from there; it holds no transaction yet, so the earliest replayable time is unknown"},
		{name: "time at the first transaction", rg: Range{FromTime: first.CommitTime}, first: first},
		{name: "time before the first transaction", rg: Range{FromTime: first.CommitTime.Add(-time.Second)}, first: first, wantErr: "give --from 0/64 (or a later LSN) to replay from there; by time, the first of them committed at 2026-11-30T21:00:00Z"},
		{name: "time, no transaction", rg: Range{FromTime: first.CommitTime}, wantErr: "give --from 0/64 (or a later LSN)"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := &rangeReplay{cfg: ReplayConfig{Slot: "walbox_replay", Range: tt.rg, From: "x"}, res: &ReplayResult{Start: 100}}
			err := r.checkStart(tt.first)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var nc *RangeNotCoveredError
			if !errors.As(err, &nc) || !errors.Is(err, ErrRangeNotCovered) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("checkStart = %v, want a RangeNotCoveredError with %q", err, tt.wantErr)
			}
		})
	}
}
