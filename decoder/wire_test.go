package decoder

import (
	"bytes"
	"math"
	"testing"
	"time"
)

// The builder used by benchmarks and the fuzz round trip must produce the
// same bytes as the hand-annotated fixtures.
func TestWireBuilderMatchesFixtures(t *testing.T) {
	tests := []struct {
		name    string
		built   []byte
		fixture []byte
	}{
		{"begin", beginMsg(fixCommitLSN, fixCommitTime, fixXID), fixBegin},
		{"commit", commitMsg(fixCommitLSN, fixEndLSN, fixCommitTime), fixCommit},
		{"relation", relationMsg(fixRelationWant()), fixRelation},
		{"insert", insertMsg(fixRelID, []Value{
			{Kind: KindText, Data: []byte("42")},
			{Kind: KindText, Data: []byte("order-7")},
			{Kind: KindText, Data: []byte(`{"a": 1}`)},
			{Kind: KindNull},
		}), fixInsert},
		{"message", messageMsg(true, fixMsgLSN, "walbox", []byte("hi")), fixMessage},
	}
	for _, tt := range tests {
		if !bytes.Equal(tt.built, tt.fixture) {
			t.Errorf("%s: builder\n%x\nfixture\n%x", tt.name, tt.built, tt.fixture)
		}
	}
}

func TestPgTime(t *testing.T) {
	tests := []struct {
		name   string
		micros int64
		want   time.Time
	}{
		{"epoch", 0, time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)},
		{"fixture", 767880000123456, fixCommitTime},
		{"one microsecond before the epoch", -1, time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)},
		{"unix epoch", -microsecFromUnixEpochToY2K, time.Unix(0, 0).UTC()},
	}
	for _, tt := range tests {
		if got := pgTime(tt.micros); !got.Equal(tt.want) || got.Location() != time.UTC {
			t.Errorf("%s: pgTime(%d) = %v, want %v", tt.name, tt.micros, got, tt.want)
		}
	}
	// Garbled timestamps (including Postgres' ±infinity, the int64 extremes)
	// must convert without overflowing into a wrong but plausible time, and
	// back exactly.
	for _, us := range []int64{math.MaxInt64, math.MinInt64, math.MaxInt64 - 1, math.MinInt64 + 1} {
		if back := int64(pgMicros(pgTime(us))); back != us {
			t.Errorf("pgTime(%d) round-trips to %d", us, back)
		}
	}
	if !pgTime(math.MaxInt64).After(pgTime(0)) || !pgTime(math.MinInt64).Before(pgTime(0)) {
		t.Error("extreme timestamps wrapped around")
	}
}

func TestCstring(t *testing.T) {
	tests := []struct {
		in       string
		off      int
		want     string
		wantNext int
		wantOK   bool
	}{
		{"ab\x00cd", 0, "ab", 3, true},
		{"ab\x00", 2, "", 3, true},
		{"ab\x00", 3, "", 3, false}, // at the end: no NUL left
		{"ab", 0, "", 0, false},
		{"ab", 5, "", 5, false}, // past the end must not panic
	}
	for _, tt := range tests {
		s, next, ok := cstring([]byte(tt.in), tt.off)
		if s != tt.want || next != tt.wantNext || ok != tt.wantOK {
			t.Errorf("cstring(%q, %d) = %q, %d, %v; want %q, %d, %v", tt.in, tt.off, s, next, ok, tt.want, tt.wantNext, tt.wantOK)
		}
	}
}
