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

// TestReplayEnd: the end of a replay is the range's upper LSN, the server's
// position at start (exclusive: nothing committing there had committed
// when the replay started), or a commit time past --to plus the slack.
func TestReplayEnd(t *testing.T) {
	to := time.Date(2026, 11, 30, 22, 0, 0, 0, time.UTC)
	r := &rangeReplay{end: 200, current: 300, cfg: ReplayConfig{Range: Range{ToTime: to}}}
	for _, tt := range []struct {
		lsn  pglogrepl.LSN
		at   time.Time
		want bool
	}{
		{200, to, false},
		{201, to, true},
		{150, to.Add(endTimeSlack), false},
		{150, to.Add(endTimeSlack + time.Microsecond), true},
	} {
		if got := r.pastEnd(tt.lsn, tt.at); got != tt.want {
			t.Errorf("pastEnd(%s, %s) = %t, want %t", tt.lsn, tt.at, got, tt.want)
		}
	}
	r = &rangeReplay{end: 300, current: 300}
	if !r.pastEnd(300, to) || r.pastEnd(299, to) {
		t.Error("a commit at the server's position at start must end the replay, one before it not")
	}
}

// TestCheckStart: a range beginning before the trailing slot's position is
// refused with the earliest LSN and, when a transaction was seen, its time,
// as --from values that work.
//
// Regression (issue 15): the refusal of a --from TIME before a trailing
// slot only seconds old advised a longer --replay-window, which cannot
// help; it now says which --from works.
func TestCheckStart(t *testing.T) {
	first := &decoder.Begin{CommitLSN: 120, CommitTime: time.Date(2026, 11, 30, 21, 0, 0, 0, time.UTC)}
	for _, tt := range []struct {
		name    string
		rg      Range
		first   *decoder.Begin
		wantErr string
	}{
		{name: "LSN at the slot", rg: Range{FromLSN: 100}, first: first},
		{name: "LSN before the slot", rg: Range{FromLSN: 99}, first: first, wantErr: `the earliest position trailing slot "walbox_replay" holds is 0/64 (its first transaction committed at 2026-11-30T21:00:00Z); use --from 2026-11-30T21:00:00Z or later, or --from 0/64`},
		{name: "LSN before the slot, no transaction", rg: Range{FromLSN: 99}, wantErr: "earliest replayable time is unknown: use --from 0/64 or a later LSN"},
		{name: "time at the first transaction", rg: Range{FromTime: first.CommitTime}, first: first},
		{name: "time before the first transaction", rg: Range{FromTime: first.CommitTime.Add(-time.Second)}, first: first, wantErr: "use --from 2026-11-30T21:00:00Z or later, or --from 0/64"},
		{name: "time, no transaction", rg: Range{FromTime: first.CommitTime}, wantErr: "use --from 0/64 or a later LSN"},
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
