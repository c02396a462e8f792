package pipeline

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
)

func TestResumeOnHistory(t *testing.T) {
	srv := serverHistory{
		History:  History{SystemID: "71", Timeline: 3, Database: "app", Slot: "walbox"},
		WALEnd:   0x9000,
		Switches: map[int32]pglogrepl.LSN{1: 0x2000, 2: 0x5000},
	}
	on := func(tli int32) History { h := srv.History; h.Timeline = tli; return h }
	for _, tt := range []struct {
		name         string
		last         History
		pos          pglogrepl.LSN
		wantStart    pglogrepl.LSN
		wantSwitched bool
		wantCutoff   pglogrepl.LSN
		wantReason   string
	}{
		{name: "first session: the slot's position on this server", pos: 0x9500, wantStart: 0x9500},
		{name: "same timeline", last: on(3), pos: 0x8000, wantStart: 0x8000},
		{name: "same timeline, WAL ends before the position", last: on(3), pos: 0x9100,
			wantSwitched: true, wantCutoff: 0x9000, wantReason: "before walbox's position"},
		// The lost rows: the lagging standby was promoted at 0x5000 while
		// walbox had streamed the old primary to 0x7000. Requesting
		// 0x7000 made the server skip the new transactions below it.
		{name: "ancestor timeline beyond its switch point", last: on(2), pos: 0x7000,
			wantStart: 0x5000, wantSwitched: true, wantCutoff: 0x5000, wantReason: "switched from timeline 2 to 3 at 0/5000"},
		{name: "ancestor timeline before its switch point", last: on(2), pos: 0x4000,
			wantStart: 0x4000, wantSwitched: true, wantCutoff: 0x5000},
		{name: "an older ancestor: its own switch point", last: on(1), pos: 0x4000,
			wantStart: 0x2000, wantSwitched: true, wantCutoff: 0x2000},
		{name: "a later timeline: nothing shared", last: on(4), pos: 0x4000,
			wantSwitched: true, wantReason: "not an ancestor"},
		{name: "a history that cannot be read: nothing known to be shared", last: on(2), pos: 0x4000,
			wantSwitched: true, wantReason: "cannot be read (no history file)"},
		{name: "another cluster: nothing shared", last: History{SystemID: "72", Timeline: 3}, pos: 0x4000,
			wantSwitched: true, wantReason: "another Postgres cluster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv := srv
			if strings.Contains(tt.wantReason, "cannot be read") {
				srv.Switches, srv.SwitchesErr = nil, errors.New("no history file")
			}
			got := resumeOnHistory(tt.last, tt.pos, srv)
			if got.start != tt.wantStart || got.switched != tt.wantSwitched || got.cutoff != tt.wantCutoff {
				t.Fatalf("got start %s switched %v cutoff %s, want %s %v %s", got.start, got.switched, got.cutoff, tt.wantStart, tt.wantSwitched, tt.wantCutoff)
			}
			if !strings.Contains(got.reason, tt.wantReason) {
				t.Errorf("reason %q, want it to contain %q", got.reason, tt.wantReason)
			}
		})
	}
}

func TestSentLedger(t *testing.T) {
	var l sentLedger
	for _, c := range []pglogrepl.LSN{0x100, 0x100, 0x200, 0x300, 0x300, 0x300} {
		l.add(c)
	}
	l.add(0x200) // a transaction sent again after a reconnect
	if n, exact := l.since(0x200); n != 5 || !exact {
		t.Fatalf("since 0x200 = %d, %v; want 5, true", n, exact)
	}
	l.forgetFrom(0x200)
	if n, _ := l.since(0); n != 2 {
		t.Fatalf("after forgetFrom(0x200), %d records counted; want the 2 of 0x100", n)
	}

	var full sentLedger
	for i := range maxSentMarks + 1 {
		full.add(pglogrepl.LSN(i + 1))
	}
	if n, exact := full.since(1); exact || n != maxSentMarks/2+1 {
		t.Fatalf("a truncated ledger counts %d, exact %v; want %d, false", n, exact, maxSentMarks/2+1)
	}
	if _, exact := full.since(maxSentMarks); !exact {
		t.Fatal("a count within the kept marks is exact")
	}
}

func TestDedupWindowForgetsFromTheSwitchPoint(t *testing.T) {
	w := newDedupWindow(4)
	for _, c := range []pglogrepl.LSN{0x100, 0x200, 0x300} {
		w.remember(replayKey{commit: c})
	}
	w.prepareReplay(nil)
	w.forgetFrom(0x200)
	if !w.seen(replayKey{commit: 0x100}) || w.seen(replayKey{commit: 0x200}) || w.seen(replayKey{commit: 0x300}) {
		t.Fatal("the replay set keeps only the keys below the switch point")
	}
	w.prepareReplay(nil) // a further reconnect rebuilds it from the ring
	if w.seen(replayKey{commit: 0x300}) {
		t.Fatal("the ring still holds a key of the erased history")
	}
}

// TestFailoverErasedIsReported: the events a failover erased are what
// /readyz reports (FailoverErased), summed over failovers, with the time
// of the last; before any, nothing.
func TestFailoverErasedIsReported(t *testing.T) {
	tl := newTestLoop(t, Config{}, &fakeProducer{})
	r := tl.relay
	if n, at := r.FailoverErased(); n != 0 || !at.IsZero() {
		t.Fatalf("before a failover: %d at %v, want nothing", n, at)
	}
	old := History{SystemID: "71", Timeline: 1, Database: "app", Slot: "walbox"}
	promoted := serverHistory{History: old, WALEnd: 0x9000, Switches: map[int32]pglogrepl.LSN{1: 0x2000}}
	promoted.Timeline = 2
	r.history = old
	for _, c := range []pglogrepl.LSN{0x1000, 0x3000, 0x3000, 0x4000} {
		r.sent.add(c)
	}
	before := time.Now()
	if start := r.adoptHistory(0x5000, promoted); start != 0x2000 {
		t.Fatalf("start %s, want the switch point 0/2000", start)
	}
	n, at := r.FailoverErased()
	if n != 3 || at.Before(before.Add(-time.Second)) {
		t.Fatalf("after the failover: %d at %v, want the 3 events committed after 0/2000, now", n, at)
	}
}
