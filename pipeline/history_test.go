package pipeline

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/logbuf"
)

func TestParseTimelineHistory(t *testing.T) {
	got, err := parseTimelineHistory([]byte("1\t0/3000158\tno recovery target specified\n\n# comment\n2\t0/5000060\tat restore point \"x\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[1] != 0x3000158 || got[2] != 0x5000060 {
		t.Fatalf("parsed %v", got)
	}
	if _, err := parseTimelineHistory([]byte("1\tnot-an-lsn\n")); err == nil {
		t.Fatal("a bad LSN parsed")
	}
}

func TestResumeFrom(t *testing.T) {
	srv := serverHistory{
		History:  History{SystemID: "71", Timeline: 3, Database: "app", Slot: "walbox"},
		WALEnd:   0x9000,
		Switches: map[int32]pglogrepl.LSN{1: 0x2000, 2: 0x5000},
	}
	at := func(end pglogrepl.LSN, h History) StatePosition {
		return StatePosition{CommitLSN: end - 0x10, EndLSN: end, History: h}
	}
	same := srv.History
	with := func(f func(*History)) History { h := same; f(&h); return h }
	for _, tt := range []struct {
		name     string
		pos      StatePosition
		wantSkip pglogrepl.LSN
		wantWarn string
		wantErr  string
	}{
		{name: "no position", pos: StatePosition{}},
		{name: "same history", pos: at(0x8000, same), wantSkip: 0x8000},
		{name: "same timeline beyond the WAL (an older backup restored)", pos: at(0x9100, same), wantErr: "beyond the server's WAL on the same timeline"},
		{name: "another cluster", pos: at(0x100, with(func(h *History) { h.SystemID = "72" })), wantErr: "system identifiers differ"},
		{name: "another database", pos: at(0x100, with(func(h *History) { h.Database = "other" })), wantErr: `database "other"`},
		{name: "another slot", pos: at(0x100, with(func(h *History) { h.Slot = "other" })), wantErr: `slot "other"`},
		{name: "a later timeline", pos: at(0x100, with(func(h *History) { h.Timeline = 4 })), wantErr: "later timeline"},
		{name: "a timeline that is not an ancestor", pos: at(0x100, with(func(h *History) { h.Timeline = 0 })), wantErr: "not an ancestor"},
		{name: "ancestor timeline before its switch point", pos: at(0x4000, with(func(h *History) { h.Timeline = 2 })), wantSkip: 0x4000},
		{name: "ancestor timeline at its switch point", pos: at(0x5000, with(func(h *History) { h.Timeline = 2 })), wantSkip: 0x5000},
		// The old timeline went on past the switch point: those LSNs are
		// the new timeline's transactions, which must be produced.
		{name: "ancestor timeline beyond its switch point", pos: at(0x6000, with(func(h *History) { h.Timeline = 2 })), wantSkip: 0x5000, wantWarn: "beyond where the server switched"},
		{name: "grandparent timeline beyond its switch point", pos: at(0x4000, with(func(h *History) { h.Timeline = 1 })), wantSkip: 0x2000, wantWarn: "beyond where the server switched"},
		{name: "an older walbox's record", pos: at(0x8000, History{Slot: "walbox"}), wantSkip: 0x8000, wantWarn: "older walbox"},
		{name: "an older walbox's record beyond the WAL", pos: at(0x9100, History{Slot: "walbox"}), wantErr: "beyond the server's WAL"},
		{name: "an older walbox's record of another slot", pos: at(0x100, History{Slot: "other"}), wantErr: `slot "other"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			skip, warn, err := resumeFrom(tt.pos, srv)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrHistoryMismatch) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrHistoryMismatch with %q", err, tt.wantErr)
				}
				for _, w := range []string{tt.pos.History.String(), srv.History.String(), "--transactional-id"} {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the error does not name %q: %v", w, err)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if skip != tt.wantSkip {
				t.Errorf("skip up to %s, want %s", skip, tt.wantSkip)
			}
			if (tt.wantWarn == "") != (warn == "") || !strings.Contains(warn, tt.wantWarn) {
				t.Errorf("warning %q, want one with %q", warn, tt.wantWarn)
			}
		})
	}
}

// TestEOSReadsAnOlderWalboxsStateOnce: a record written before walbox
// recorded the history (its JSON has only the slot and the LSNs) is still
// trusted, with a warning; the next commit records the history.
func TestEOSReadsAnOlderWalboxsStateOnce(t *testing.T) {
	parallel(t)
	c := eosCluster(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID(TransactionalIDFor("walbox")))
	if err != nil {
		t.Fatal(err)
	}
	compact := "compact"
	if _, err := kadm.NewClient(cl).CreateTopic(ctx, 1, -1, map[string]*string{"cleanup.policy": &compact}, "walbox.state"); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	old := `{"slot":"walbox","commit_lsn":"0/1000","end_lsn":"0/1010","records":1}`
	if err := cl.ProduceSync(ctx, &kgo.Record{Topic: "walbox.state", Key: []byte(TransactionalIDFor("walbox")), Value: []byte(old)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	cl.Close()

	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 1, TransactionMaxInterval: time.Hour}, 1)
	if !strings.Contains(el.log.String(), "written by an older walbox") {
		t.Fatalf("no warning about the old record:\n%s", el.log.String())
	}
	for _, tx := range []struct {
		commit pglogrepl.LSN
		row    string
	}{{0x1000, "a1"}, {0x2000, "b1"}} {
		if err := el.txn(t, tx.commit, tx.row); err != nil {
			t.Fatal(err)
		}
	}
	if got := strings.Join(readCommitted(t, c, eosTopic), " "); got != "b1" {
		t.Fatalf("read_committed saw %q, want b1 (a1 is before the old record's position)", got)
	}
	pos, err := el.eos.state.Last(ctx, TransactionalIDFor("walbox"))
	if err != nil {
		t.Fatal(err)
	}
	if pos.History != testServer.History {
		t.Fatalf("the next commit recorded history %+v, want %+v", pos.History, testServer.History)
	}
}

// TestKafkaStateEnsure: a missing state topic is created with 1 partition
// and cleanup.policy=compact; an existing one that would hide or drop
// positions is refused with the fix. Both used to be accepted as they were.
func TestKafkaStateEnsure(t *testing.T) {
	c := eosCluster(t)
	ctx := context.Background()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	del, compact := "delete", "compact"
	for _, tt := range []struct {
		name       string
		partitions int32
		configs    map[string]*string // nil: no topic
		wantErr    string
		wantLog    string
	}{
		{name: "missing", wantLog: "single replica"},
		{name: "compacted, one partition", partitions: 1, configs: map[string]*string{"cleanup.policy": &compact}, wantLog: "single replica"},
		{name: "several partitions", partitions: 3, configs: map[string]*string{"cleanup.policy": &compact}, wantErr: "3 partitions"},
		{name: "delete policy", partitions: 1, configs: map[string]*string{"cleanup.policy": &del}, wantErr: `cleanup.policy is "delete"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			topic := "state." + strings.ReplaceAll(tt.name, " ", "-")
			topic = strings.ReplaceAll(topic, ",", "")
			if tt.configs != nil {
				if _, err := adm.CreateTopic(ctx, tt.partitions, 1, tt.configs, topic); err != nil {
					t.Fatal(err)
				}
			}
			lb := &logbuf.Buffer{}
			err := NewKafkaState(KafkaConfig{Brokers: c.ListenAddrs()}, topic).Ensure(ctx, slog.New(slog.NewTextHandler(lb, nil)))
			if tt.wantErr != "" {
				if !errors.Is(err, ErrStateTopic) || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "cleanup.policy=compact") {
					t.Fatalf("Ensure = %v, want ErrStateTopic with %q and the fix", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(lb.String(), tt.wantLog) {
				t.Errorf("log lacks %q:\n%s", tt.wantLog, lb.String())
			}
			td, err := adm.ListTopics(ctx, topic)
			if err != nil || len(td[topic].Partitions) != 1 {
				t.Fatalf("topic %s: %v partitions, %v", topic, len(td[topic].Partitions), err)
			}
			rcs, err := adm.DescribeTopicConfigs(ctx, topic)
			if err != nil {
				t.Fatal(err)
			}
			rc, _ := rcs.On(topic, nil)
			for _, cfg := range rc.Configs {
				if cfg.Key == "cleanup.policy" && (cfg.Value == nil || *cfg.Value != "compact") {
					t.Errorf("cleanup.policy = %v, want compact", cfg.Value)
				}
			}
		})
	}
}

// TestEOSDeletedStateTopicIsCreatedAgain: the state topic was checked
// once per process, so after it was deleted every session failed (or the
// producer auto-created it with the brokers' defaults). Each session checks
// it now and creates it again.
func TestEOSDeletedStateTopicIsCreatedAgain(t *testing.T) {
	c := eosCluster(t)
	el := newEOSLoop(t, c, Config{TransactionMaxRecords: 1, TransactionMaxInterval: time.Hour}, 1)
	if err := el.txn(t, 0x1000, "a1"); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := kadm.NewClient(el.cl).DeleteTopic(ctx, "walbox.state"); err != nil {
		t.Fatal(err)
	}
	if err := el.newSession(t); err != nil {
		t.Fatalf("session after the state topic was deleted: %v", err)
	}
	if err := el.txn(t, 0x2000, "b1"); err != nil {
		t.Fatal(err)
	}
	pos, err := el.eos.state.Last(ctx, TransactionalIDFor("walbox"))
	if err != nil || pos.EndLSN != 0x2010 {
		t.Fatalf("position after the topic was created again: %+v, %v; want end 0/2010", pos, err)
	}
}

// TestResumeFromRecordsWithoutAncestry: a state record of the walbox
// before ancestries (system, timeline and database, no "ancestry") is
// compared with a server whose ancestry is known by the timeline numbers;
// and a walbox before ancestries reads a new record (its JSON ignores the
// field) as the same position.
func TestResumeFromRecordsWithoutAncestry(t *testing.T) {
	srv := serverHistory{
		History:  History{SystemID: "71", Timeline: 3, Database: "app", Slot: "walbox", Ancestry: "1@0/2000 2@0/5000"},
		WALEnd:   0x9000,
		Switches: map[int32]pglogrepl.LSN{1: 0x2000, 2: 0x5000},
	}
	old := func(end pglogrepl.LSN, tli int32) StatePosition {
		return StatePosition{CommitLSN: end - 0x10, EndLSN: end, History: History{SystemID: "71", Timeline: tli, Database: "app", Slot: "walbox"}}
	}
	for _, tt := range []struct {
		name     string
		pos      StatePosition
		wantSkip pglogrepl.LSN
	}{
		{"same timeline number", old(0x8000, 3), 0x8000},
		{"ancestor timeline before its switch point", old(0x4000, 2), 0x4000},
		{"ancestor timeline beyond its switch point", old(0x6000, 2), 0x5000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			skip, _, err := resumeFrom(tt.pos, srv)
			if err != nil || skip != tt.wantSkip {
				t.Fatalf("resumeFrom = %s, %v; want %s", skip, err, tt.wantSkip)
			}
		})
	}

	b := encodeState(StatePosition{CommitLSN: 0x7ff0, EndLSN: 0x8000, History: srv.History}, 3)
	var before struct {
		Slot      string `json:"slot"`
		CommitLSN string `json:"commit_lsn"`
		EndLSN    string `json:"end_lsn"`
		Timeline  int32  `json:"timeline"`
	}
	if err := json.Unmarshal(b, &before); err != nil || before.EndLSN != "0/8000" || before.Timeline != 3 {
		t.Fatalf("a walbox before ancestries reads %+v, %v from %s", before, err, b)
	}
	got, err := decodeState(b)
	if err != nil || got.History != srv.History {
		t.Fatalf("decodeState(%s) = %+v, %v; want the history %+v", b, got.History, err, srv.History)
	}
}
