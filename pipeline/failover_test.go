package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
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
	for _, k := range []replayKey{{0x100, 0}, {0x100, 1}, {0x200, 0}, {0x300, 0}, {0x300, 1}, {0x300, 2}} {
		l.acked(k, false)
	}
	// A transaction produced again after a reconnect, its records
	// acknowledged twice: each counts once.
	l.acked(replayKey{0x200, 0}, false)
	l.acked(replayKey{0x300, 2}, false)
	if n, exact := l.since(0x200); n != 4 || !exact {
		t.Fatalf("since 0x200 = %d, %v; want 4, true", n, exact)
	}
	// Exactly once: acknowledged records count only once their Kafka
	// transaction commits.
	l.acked(replayKey{0x400, 0}, true)
	l.acked(replayKey{0x400, 1}, true)
	if n, _ := l.since(0x400); n != 0 {
		t.Fatalf("%d records of an uncommitted Kafka transaction counted", n)
	}
	l.aborted()
	l.acked(replayKey{0x400, 0}, true)
	l.committed()
	if n, _ := l.since(0x400); n != 1 {
		t.Fatalf("%d records of 0x400 counted; want the 1 committed (the aborted transaction's none)", n)
	}
	l.acked(replayKey{0x500, nonTransactional}, false)
	l.acked(replayKey{0x500, nonTransactional}, false)
	if n, _ := l.since(0x500); n != 1 {
		t.Fatalf("a non-transactional message acknowledged twice counts %d", n)
	}
	l.forgetFrom(0x200)
	if n, _ := l.since(0); n != 2 {
		t.Fatalf("after forgetFrom(0x200), %d records counted; want the 2 of 0x100", n)
	}

	var full sentLedger
	for i := range maxSentMarks + 1 {
		full.acked(replayKey{commit: pglogrepl.LSN(i + 1)}, false)
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
	r.failover.history = old
	for _, k := range []replayKey{{0x1000, 0}, {0x3000, 0}, {0x3000, 1}, {0x4000, 0}} {
		r.failover.sent.acked(k, false)
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

// TestHistoriesComparedByContent: two standbys of one primary promoted one
// after the other, without a shared archive, are both on timeline 2 with
// different switch points. walbox compared the timeline numbers only and
// resumed at its position on the first one's timeline: the second one's
// transactions below it were never delivered, and the first one's that the
// second lacks were not reported.
func TestHistoriesComparedByContent(t *testing.T) {
	b := History{SystemID: "71", Timeline: 2, Database: "app", Slot: "walbox", Ancestry: "1@0/5000"}
	c := b
	c.Ancestry = "1@0/3000"
	d := History{SystemID: "71", Timeline: 3, Database: "app", Slot: "walbox", Ancestry: "1@0/5000 2@0/7000"}
	one := History{SystemID: "71", Timeline: 1, Database: "app", Slot: "walbox"}
	for _, tt := range []struct {
		name    string
		a, b    History
		wantRel historyRelation
		wantEnd pglogrepl.LSN
	}{
		{"same", b, b, historiesSame, 0},
		{"first timeline on both", one, one, historiesSame, 0},
		{"siblings on timeline 2", b, c, historiesDiverged, 0x3000},
		{"siblings, the other way", c, b, historiesDiverged, 0x3000},
		{"timeline 1 is an ancestor of 2", one, b, historyAncestor, 0x5000},
		{"timeline 2 descends from 1", b, one, historyDescendant, 0x5000},
		{"grandparent", one, d, historyAncestor, 0x5000},
		{"parent", b, d, historyAncestor, 0x7000},
		{"an uncle", c, d, historiesDiverged, 0x3000},
		{"ancestry not recorded", History{SystemID: "71", Timeline: 2}, b, historiesUnknown, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			rel, end := sharedHistory(tt.a, tt.b)
			if rel != tt.wantRel || (rel != historiesSame && rel != historiesUnknown && end != tt.wantEnd) {
				t.Fatalf("sharedHistory = %v, %s; want %v, %s", rel, end, tt.wantRel, tt.wantEnd)
			}
		})
	}

	srvC := serverHistory{History: c, WALEnd: 0x9000, Switches: map[int32]pglogrepl.LSN{1: 0x3000}}
	got := resumeOnHistory(b, 0x6000, srvC)
	if got.start != 0x3000 || !got.switched || got.cutoff != 0x3000 || !strings.Contains(got.reason, "share WAL up to 0/3000") {
		t.Fatalf("walbox at 0/6000 on B's timeline 2, server C on timeline 2 switched at 0/3000: got %+v, want a resume at 0/3000", got)
	}
	if got := resumeOnHistory(b, 0x6000, serverHistory{History: b, WALEnd: 0x9000}); got.switched || got.start != 0x6000 {
		t.Fatalf("the same history: got %+v, want the position kept", got)
	}
	// The same in exactly-once mode: the committed position on B's
	// timeline 2 skips only what C shares with it.
	skip, warn, err := resumeFrom(StatePosition{CommitLSN: 0x5ff0, EndLSN: 0x6000, History: b}, srvC)
	if err != nil || skip != 0x3000 || !strings.Contains(warn, "shares with the server's") {
		t.Fatalf("resumeFrom B's position on C = %s, %q, %v; want 0/3000 with a warning", skip, warn, err)
	}
	if _, _, err := resumeFrom(StatePosition{CommitLSN: 0x100, EndLSN: 0x200, History: d}, serverHistory{History: b, WALEnd: 0x9000}); err == nil || !strings.Contains(err.Error(), "left the server's timeline 2") {
		t.Fatalf("a position of a timeline that descends from the server's: %v, want a refusal", err)
	}
}

// TestOwnCommitOnAnOldTimelineDoesNotOverrideTheStateTopic: an exactly-once
// --standby instance's own last commit on timeline 1 overrode its peer's
// newer commit on timeline 2 at a lower LSN, and the peer's committed
// events were produced again.
func TestOwnCommitOnAnOldTimelineDoesNotOverrideTheStateTopic(t *testing.T) {
	tl1 := History{SystemID: "71", Timeline: 1, Database: "app", Slot: "walbox"}
	tl2 := History{SystemID: "71", Timeline: 2, Database: "app", Slot: "walbox", Ancestry: "1@0/3000"}
	at := func(end pglogrepl.LSN, h History) StatePosition {
		return StatePosition{CommitLSN: end - 0x10, EndLSN: end, History: h}
	}
	for _, tt := range []struct {
		name      string
		own, read StatePosition
		want      bool
	}{
		{"nothing read", at(0x5000, tl1), StatePosition{}, true},
		{"same history, own later (a compaction race)", at(0x5000, tl1), at(0x4000, tl1), true},
		{"same history, own earlier", at(0x4000, tl1), at(0x5000, tl1), false},
		{"own on timeline 1 at a higher LSN, the peer's on timeline 2", at(0x5000, tl1), at(0x4000, tl2), false},
		{"own on timeline 2, the state topic's on timeline 1", at(0x4000, tl2), at(0x5000, tl1), true},
		{"an older walbox's record", at(0x5000, tl1), at(0x4000, History{Slot: "walbox"}), true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.own.supersedes(tt.read); got != tt.want {
				t.Fatalf("supersedes = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestStandbyServerIsRetried: a session that reached a standby ends with
// standbyServerError, also when START_REPLICATION refused it with SQLSTATE
// 55000 (object_not_in_prerequisite_state), which alone is not retryable:
// walbox stopped for good when a flapping endpoint reached a standby.
func TestStandbyServerIsRetried(t *testing.T) {
	refusal := fmt.Errorf("start replication on slot %q: %w", "walbox", &pgconn.PgError{Code: "55000", Message: "cannot use replication slot \"walbox\" for logical decoding"})
	if IsRetryable(refusal) {
		t.Fatal("a bare 55000 is retryable: the test does not test")
	}
	for _, err := range []error{
		&standbyServerError{host: "127.0.0.1:5432", timeline: 1, walEnd: 0x5000},
		&standbyServerError{host: "127.0.0.1:5432", timeline: 1, walEnd: 0x5000, err: refusal},
	} {
		if !IsRetryable(err) {
			t.Errorf("not retryable: %v", err)
		}
		for _, want := range []string{"127.0.0.1:5432", "standby", "target_session_attrs=read-write", "--heartbeat-interval=0"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q does not name %q", err, want)
			}
		}
	}
	if !isPrerequisiteState(refusal) {
		t.Error("55000 not recognised through the wrapping")
	}
}

func TestStandbyFollowed(t *testing.T) {
	tl1 := History{SystemID: "71", Timeline: 1, Database: "app", Slot: "walbox"}
	tl2 := serverHistory{History: History{SystemID: "71", Timeline: 2, Database: "app", Slot: "walbox", Ancestry: "1@0/5000"},
		Switches: map[int32]pglogrepl.LSN{1: 0x5000}, SlotConfirmed: 0x6000}
	unread := serverHistory{History: History{SystemID: "71", Timeline: 2, Database: "app", Slot: "walbox"},
		Switches: map[int32]pglogrepl.LSN{1: 0x5000}, SlotConfirmed: 0x6000}
	notHere := tl2
	notHere.SlotConfirmed = 0x5000
	sibling := History{SystemID: "71", Timeline: 2, Database: "app", Slot: "walbox", Ancestry: "1@0/4000"}
	other := serverHistory{History: History{SystemID: "72", Timeline: 2, Database: "app", Slot: "walbox", Ancestry: "1@0/5000"}}
	for _, tt := range []struct {
		name string
		last History
		from pglogrepl.LSN
		srv  serverHistory
		want bool
	}{
		{"promoted after walbox began decoding it", tl1, 0x3000, tl2, true},
		{"begun at the switch point", tl1, 0x5000, tl2, true},
		{"begun beyond the switch point (the old primary's WAL streamed)", tl1, 0x6000, tl2, false},
		{"ancestry unread, by the numbers", tl1, 0x3000, unread, true},
		{"a sibling timeline", sibling, 0x3000, tl2, false},
		{"the slot not confirmed past the switch point (another standby, or nothing confirmed there)", tl1, 0x3000, notHere, false},
		{"the same timeline", tl2.History, 0x3000, tl2, false},
		{"another cluster", tl1, 0x3000, other, false},
		{"nothing recorded", History{}, 0, tl2, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := standbyFollowed(tt.last, tt.from, tt.srv); got != tt.want {
				t.Errorf("standbyFollowed = %v, want %v", got, tt.want)
			}
		})
	}
}
