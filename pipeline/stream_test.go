package pipeline

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
)

// Stream messages of pgoutput protocol version 2 (see decoder/stream_test.go
// for the annotated layouts).

func pgStreamStart(xid uint32, first bool) []byte {
	b := be32([]byte{'S'}, xid)
	if first {
		return append(b, 1)
	}
	return append(b, 0)
}

var pgStreamStop = []byte{'E'}

func pgStreamCommit(xid uint32, commit pglogrepl.LSN) []byte {
	b := be32([]byte{'c'}, xid)
	b = append(b, 0)
	b = be64(b, uint64(commit))
	b = be64(b, uint64(commit)+16)
	return be64(b, 0)
}

func pgStreamAbort(xid, sub uint32) []byte { return be32(be32([]byte{'A'}, xid), sub) }

// inStream tags a message with the xid of its (sub)transaction.
func inStream(xid uint32, msg []byte) []byte {
	return append(be32([]byte{msg[0]}, xid), msg[1:]...)
}

func streamingTestLoop(t *testing.T, cfg Config, p *fakeProducer) *testLoop {
	t.Helper()
	if cfg.SpoolDir == "" {
		cfg.SpoolDir = t.TempDir()
	}
	l := newTestLoop(t, cfg, p)
	l.dec.SetStreaming(true)
	t.Cleanup(l.stream.spool.close)
	return l
}

// finishReplay runs the loop's replay of a committed streamed transaction
// to its end, as run does between receives.
func (tl *testLoop) finishReplay(t *testing.T) {
	t.Helper()
	for tl.stream.replay != nil {
		if err := tl.replayStep(); err != nil {
			t.Fatal(err)
		}
	}
}

func eventIDs(recs []*kgo.Record) string {
	var ids []string
	for _, r := range recs {
		ids = append(ids, string(r.Headers[0].Value))
	}
	return strings.Join(ids, ",")
}

// TestLoopStreamedTransactions: two streamed transactions interleave; one
// rolls a subtransaction back, a third aborts whole, an ordinary
// transaction commits between them. Nothing is produced before its Stream
// Commit, transactions come out whole in commit order, the aborted
// subtransaction's rows and the aborted transaction are dropped, and the
// relation sent inside the aborted subtransaction still describes the
// later rows of its transaction.
func TestLoopStreamedTransactions(t *testing.T) {
	p := &fakeProducer{outcome: func(*kgo.Record) error { return nil }}
	l := streamingTestLoop(t, Config{}, p)
	rel := pgRelation(outboxRel, "public", "outbox")

	// xid 100 with subtransaction 101, xid 200, xid 300: blocks interleave.
	l.wal(t, pgStreamStart(100, true))
	l.wal(t, inStream(101, rel)) // first needed by the subtransaction
	l.wal(t, inStream(101, pgInsert(outboxRel, "a-sub", "agg1", `{}`)))
	l.wal(t, inStream(100, pgInsert(outboxRel, "a1", "agg1", `{}`)))
	l.wal(t, pgStreamStop)
	l.wal(t, pgStreamStart(200, true))
	l.wal(t, inStream(200, rel))
	l.wal(t, inStream(200, pgInsert(outboxRel, "b1", "agg2", `{}`)))
	l.wal(t, pgStreamStop)
	l.wal(t, pgStreamStart(300, true))
	l.wal(t, inStream(300, rel))
	l.wal(t, inStream(300, pgInsert(outboxRel, "c1", "agg3", `{}`)))
	l.wal(t, pgStreamStop)
	l.wal(t, pgStreamAbort(100, 101)) // ROLLBACK TO SAVEPOINT
	l.wal(t, pgStreamStart(100, false))
	l.wal(t, inStream(100, pgInsert(outboxRel, "a2", "agg1", `{}`)))
	l.wal(t, pgStreamStop)
	l.wal(t, pgStreamAbort(300, 300))
	if n := len(p.records()); n != 0 {
		t.Fatalf("%d records produced before any commit", n)
	}
	if got := testutil.ToFloat64(l.stream.metrics.spoolBytes); got <= 0 {
		t.Fatalf("walbox_spool_bytes = %v while two transactions are spooled", got)
	}

	// xid 200 commits first, then an ordinary transaction, then 100.
	l.wal(t, pgStreamCommit(200, 0x2000))
	l.finishReplay(t)
	l.wal(t, pgBegin(0x3000, 400))
	l.wal(t, pgInsert(outboxRel, "d1", "agg4", `{}`))
	l.wal(t, pgCommit(0x3000))
	l.wal(t, pgStreamCommit(100, 0x4000))
	l.finishReplay(t)

	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got, want := eventIDs(p.records()), "b1,d1,a1,a2"; got != want {
		t.Fatalf("produced %s, want %s", got, want)
	}
	if got := l.tracker.Confirmed(); got != 0x4010 {
		t.Fatalf("confirmed %s, want the last commit's end 0/4010", got)
	}
	if got := testutil.ToFloat64(l.stream.metrics.transactions); got != 2 {
		t.Errorf("walbox_streamed_transactions_total = %v, want 2", got)
	}
	if sub, whole := testutil.ToFloat64(l.stream.metrics.aborts.WithLabelValues("subtransaction")),
		testutil.ToFloat64(l.stream.metrics.aborts.WithLabelValues("transaction")); sub != 1 || whole != 1 {
		t.Errorf("aborts: subtransaction %v, transaction %v; want 1, 1", sub, whole)
	}
	if got := testutil.ToFloat64(l.stream.metrics.spoolBytes); got != 0 {
		t.Errorf("walbox_spool_bytes = %v after every transaction ended", got)
	}
	if problems, err := testutil.GatherAndLint(l.reg); err != nil || len(problems) != 0 {
		t.Errorf("metrics lint: %v %v", problems, err)
	}
	entries, _ := os.ReadDir(l.stream.spool.dir)
	for _, e := range entries {
		if e.Name() != "lock" {
			t.Errorf("spool file %s left behind", e.Name())
		}
	}
}

// TestLoopStreamedReplayBackpressure: a committed streamed transaction is
// handed on no faster than the in-flight limit allows, and the loop does
// not confirm it before its last record is acknowledged.
func TestLoopStreamedReplayBackpressure(t *testing.T) {
	p := &fakeProducer{}
	l := streamingTestLoop(t, Config{MaxInflightRecords: 10}, p)
	l.wal(t, pgStreamStart(100, true))
	l.wal(t, inStream(100, pgRelation(outboxRel, "public", "outbox")))
	for i := range 25 {
		l.wal(t, inStream(100, pgInsert(outboxRel, "e"+string(rune('a'+i)), "agg", `{}`)))
	}
	l.wal(t, pgStreamStop)
	l.wal(t, pgStreamCommit(100, 0x2000))
	for settled := 0; l.stream.replay != nil; {
		if n := len(p.records()); n > settled+10 {
			t.Fatalf("%d records produced with %d acknowledged and a limit of 10", n, settled)
		}
		if !l.inflight.full() {
			if err := l.replayStep(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if got := l.tracker.Confirmed(); got >= 0x2000 {
			t.Fatalf("confirmed %s mid-transaction", got)
		}
		p.settle(t, settled, nil)
		settled++
	}
	for i := range p.records() {
		if !p.settled[i] {
			p.settle(t, i, nil)
		}
	}
	if n := len(p.records()); n != 25 {
		t.Fatalf("%d records, want 25", n)
	}
	if got := l.tracker.Confirmed(); got != 0x2010 {
		t.Fatalf("confirmed %s, want 0/2010", got)
	}
}

// TestLoopStreamedReconnect: after a reconnect the server streams an open
// transaction again from its first block; what the old session spooled of
// it must not come out twice.
func TestLoopStreamedReconnect(t *testing.T) {
	p := &fakeProducer{outcome: func(*kgo.Record) error { return nil }}
	l := streamingTestLoop(t, Config{}, p)
	rel := pgRelation(outboxRel, "public", "outbox")
	l.wal(t, pgStreamStart(100, true))
	l.wal(t, inStream(100, rel))
	l.wal(t, inStream(100, pgInsert(outboxRel, "a1", "agg1", `{}`)))
	l.wal(t, pgStreamStop)

	l.stream.spool.reset() // as session does
	l.reconnect(t)
	l.dec.SetStreaming(true)
	l.wal(t, pgStreamStart(100, true))
	l.wal(t, inStream(100, rel))
	l.wal(t, inStream(100, pgInsert(outboxRel, "a1", "agg1", `{}`)))
	l.wal(t, inStream(100, pgInsert(outboxRel, "a2", "agg1", `{}`)))
	l.wal(t, pgStreamStop)
	l.wal(t, pgStreamCommit(100, 0x2000))
	l.finishReplay(t)
	if err := p.Flush(t.Context()); err != nil {
		t.Fatal(err)
	}
	if got := eventIDs(p.records()); got != "a1,a2" {
		t.Fatalf("produced %s, want a1,a2", got)
	}

	// A later block of a transaction whose first block this session did
	// not see means lost changes: an error, not a partial transaction.
	l.reconnect(t)
	l.dec.SetStreaming(true)
	if err := l.handleWAL(0, pgStreamStart(500, false)); err == nil || !strings.Contains(err.Error(), "never saw its first") {
		t.Fatalf("continuation without a first block: %v", err)
	}
	l.reconnect(t)
	l.dec.SetStreaming(true)
	if err := l.handleWAL(0, pgStreamCommit(600, 0x3000)); err == nil || !strings.Contains(err.Error(), "never received") {
		t.Fatalf("stream commit without any block: %v", err)
	}
}

// TestSpoolFull: a streamed transaction larger than the limit ends the
// session with an error naming the option, to be sent again with protocol
// version 1 (the server keeps it whole); nothing of it is produced.
func TestSpoolFull(t *testing.T) {
	p := &fakeProducer{}
	l := streamingTestLoop(t, Config{SpoolMaxBytes: 300}, p)
	l.wal(t, pgStreamStart(100, true))
	l.wal(t, inStream(100, pgRelation(outboxRel, "public", "outbox")))
	var err error
	for i := 0; i < 10 && err == nil; i++ {
		err = l.handleWAL(0x500, inStream(100, pgInsert(outboxRel, "e", "agg", `{}`)))
	}
	if !errors.Is(err, ErrSpoolFull) || !strings.Contains(err.Error(), "--spool-max-bytes (300 bytes)") || !strings.Contains(err.Error(), "transaction 100") {
		t.Fatalf("error %v, want ErrSpoolFull naming --spool-max-bytes and the transaction", err)
	}
	if !IsRetryable(err) {
		t.Errorf("a full spool stops the relay for good (%v): the same transaction would fill it again after every restart", err)
	}
	if l.stream.unstreamXID != 100 {
		t.Errorf("the next session is not for transaction 100 with protocol version 1: unstreamXID = %d", l.stream.unstreamXID)
	}
	if len(p.records()) != 0 {
		t.Fatal("records produced")
	}
}

// TestSpoolNotWritable: an unwritable spool directory is an error naming
// --spool-dir, when the first change needs it (not at start: most
// transactions never stream).
func TestSpoolNotWritable(t *testing.T) {
	// A regular file where the directory should be: unwritable for root
	// too, unlike a mode.
	parent := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(parent, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &fakeProducer{}
	l := streamingTestLoop(t, Config{SpoolDir: filepath.Join(parent, "spool")}, p)
	l.wal(t, pgStreamStart(100, true))
	err := l.handleWAL(0x500, inStream(100, pgRelation(outboxRel, "public", "outbox")))
	if !errors.Is(err, ErrSpoolUnwritable) || !strings.Contains(err.Error(), "--spool-dir") || !strings.Contains(err.Error(), parent) {
		t.Fatalf("error %v, want ErrSpoolUnwritable naming --spool-dir and the directory", err)
	}
	// Not fatal, and no reconnect to the same failure: the next session
	// speaks protocol version 1 for the transaction.
	if !IsRetryable(err) || l.stream.unstreamXID != 100 {
		t.Errorf("retryable %v, unstreamXID %d: want a reconnect with protocol version 1 for transaction 100", IsRetryable(err), l.stream.unstreamXID)
	}
	if got := testutil.ToFloat64(l.stream.metrics.spoolErrors); got != 1 {
		t.Errorf("walbox_spool_errors_total = %v, want 1", got)
	}
}

// TestSpoolErrorsAreNotNetworkErrors: a spool's disk fault wraps a
// syscall.Errno, which has Timeout and Temporary and so passes for a
// net.Error; IsRetryable took it for one and walbox reconnected for ever
// (79 times in 30 s in the test). Only the loop's deliberate
// reconnect with protocol version 1 is retryable.
func TestSpoolErrorsAreNotNetworkErrors(t *testing.T) {
	s := newSpool("/nonexistent", 1, newStreamMetrics(nil).spoolBytes)
	for _, errno := range []syscall.Errno{syscall.ENOSPC, syscall.EACCES, syscall.EROFS, syscall.ENOTDIR, syscall.EMFILE} {
		err := s.unwritable(&os.PathError{Op: "write", Path: "/spool/1.spool", Err: errno})
		if IsRetryable(err) {
			t.Errorf("%v: retryable, want not (a disk fault is no network error)", errno)
		}
		if !IsRetryable(&connectionLostError{err: err}) {
			t.Errorf("%v: the reconnect with protocol version 1 is not retryable", errno)
		}
	}
}

// TestSpoolRemovesOnlyDeadSiblings: a start removes the subdirectory a dead
// process left, never one whose owner (a --standby peer on the same host,
// say) still holds its lock.
func TestSpoolRemovesOnlyDeadSiblings(t *testing.T) {
	parent := t.TempDir()
	dead := filepath.Join(parent, "walbox-1-dead")
	if err := os.MkdirAll(dead, 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"lock", "7.spool"} {
		if err := os.WriteFile(filepath.Join(dead, f), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	live := newSpool(parent, 1<<20, newStreamMetrics(nil).spoolBytes)
	if err := live.ensureDir(); err != nil {
		t.Fatal(err)
	}
	defer live.close()
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("dead process's spool still there: %v", err)
	}
	other := newSpool(parent, 1<<20, newStreamMetrics(nil).spoolBytes)
	if err := other.ensureDir(); err != nil {
		t.Fatal(err)
	}
	defer other.close()
	if _, err := os.Stat(live.dir); err != nil {
		t.Fatalf("a live peer's spool was removed: %v", err)
	}
	// The lock is what tells them apart.
	f, err := os.Open(filepath.Join(live.dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
		t.Fatal("a live spool's lock could be taken")
	}
	live.close()
	if _, err := os.Stat(live.dir); err == nil {
		t.Fatal("close left the directory")
	}
}

func TestPluginArgs(t *testing.T) {
	tests := []struct {
		name   string
		cfg    Config
		major  int
		want   string
		stream bool
	}{
		{"14 streams with protocol 2", Config{Publication: "walbox"}, 14, `proto_version '2',publication_names '"walbox"',streaming 'on'`, true},
		{"15 with 3", Config{Publication: "walbox"}, 15, `proto_version '3',publication_names '"walbox"',streaming 'on'`, true},
		{"16 with 4", Config{Publication: "walbox", Heartbeats: true}, 16, `proto_version '4',publication_names '"walbox"',messages 'true',streaming 'on'`, true},
		{"18 with 4", Config{Publication: "walbox"}, 18, `proto_version '4',publication_names '"walbox"',streaming 'on'`, true},
		{"unknown version keeps 1", Config{Publication: "walbox"}, 0, `proto_version '1',publication_names '"walbox"'`, false},
		{"switched off", Config{Publication: "walbox", DisableStreaming: true}, 17, `proto_version '1',publication_names '"walbox"'`, false},
	}
	for _, tt := range tests {
		args, stream := tt.cfg.pluginArgs(tt.major)
		if got := strings.Join(args, ","); got != tt.want || stream != tt.stream {
			t.Errorf("%s: %s, %v; want %s, %v", tt.name, got, stream, tt.want, tt.stream)
		}
	}
	for in, want := range map[string]int{"15.4 (Debian 15.4-1.pgdg120+1)": 15, "17beta1": 17, "18.0": 18, "": 0, "x": 0} {
		if got := serverMajor(in); got != want {
			t.Errorf("serverMajor(%q) = %d, want %d", in, got, want)
		}
	}
}

// TestSpoolStartsTogether: processes starting at once on one directory (an
// active instance and its --standby, say) never remove each other's spool
// between its creation and its lock.
func TestSpoolStartsTogether(t *testing.T) {
	parent := t.TempDir()
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range 150 {
				s := newSpool(parent, 1<<20, newStreamMetrics(nil).spoolBytes)
				err := s.append(&decoder.StreamChange{TopXID: 7, XID: 7, Kind: 'I', LSN: 1, Data: []byte("I")})
				if err == nil {
					_, err = os.Stat(s.path(7))
				}
				s.close()
				if err != nil {
					errs <- fmt.Errorf("goroutine %d, start %d: %w", g, i, err)
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpoolRolledBackMessages: inside a stream every message carries the
// top-level xid, so the spool tells a rolled back subtransaction's messages
// by position: after the subtransaction's first change they are its own,
// before the last change of the top-level transaction (or of a
// subtransaction not rolled back) they are not, in between it cannot tell.
func TestSpoolRolledBackMessages(t *testing.T) {
	const top = 100
	type step struct {
		kind  byte // 'I', 'M', or 'A' for a Stream Abort of xid
		xid   uint32
		label string
	}
	for _, tc := range []struct {
		name      string
		steps     []step
		want      string // labels read back, in order
		ambiguous bool
	}{
		{"message after the first change", []step{{'I', top, "a"}, {'I', 101, "x"}, {'M', top, "m"}, {'A', 101, ""}, {'I', top, "b"}}, "a b", false},
		{"message before a top-level change", []step{{'M', top, "m"}, {'I', top, "a"}, {'I', 101, "x"}, {'A', 101, ""}, {'I', top, "b"}}, "m a b", false},
		{"nested rollback", []step{{'I', top, "a"}, {'I', 101, "x"}, {'I', 102, "y"}, {'M', top, "m"}, {'A', 102, ""}, {'A', 101, ""}, {'M', top, "n"}}, "a n", false},
		{"message before a change of a subtransaction kept", []step{{'I', 101, "x"}, {'M', top, "m"}, {'I', 101, "z"}, {'I', 102, "y"}, {'A', 102, ""}, {'I', top, "b"}}, "x m z b", false},
		{"message between subtransactions", []step{{'I', 101, "x"}, {'M', top, "m"}, {'I', 102, "y"}, {'A', 102, ""}}, "", true},
		{"message before the first change", []step{{'I', top, "a"}, {'M', top, "m"}, {'I', 101, "x"}, {'A', 101, ""}, {'I', top, "b"}}, "", true},
		{"subtransaction with messages only", []step{{'I', top, "a"}, {'M', top, "m"}, {'A', 101, ""}}, "", true},
		{"rollback without messages", []step{{'M', top, "m"}, {'I', top, "a"}, {'I', 101, "x"}, {'A', 101, ""}}, "m a", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSpool(t.TempDir(), 1<<20, newStreamMetrics(nil).spoolBytes)
			defer s.close()
			var err error
			for i, st := range tc.steps {
				if st.kind == 'A' {
					s.abortSub(top, st.xid)
					continue
				}
				err = s.append(&decoder.StreamChange{TopXID: top, XID: st.xid, Kind: st.kind, LSN: pglogrepl.LSN(i + 1), Data: append([]byte{st.kind}, st.label...)})
				if err != nil {
					break
				}
			}
			var r *spoolReader
			if err == nil {
				r, err = s.open(top)
			}
			if tc.ambiguous {
				if !errors.Is(err, errStreamAmbiguous) {
					t.Fatalf("err %v, want errStreamAmbiguous", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for {
				c, err := r.next()
				if err != nil {
					break
				}
				got = append(got, string(c.Data[1:]))
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Fatalf("read back %q, want %q", g, tc.want)
			}
		})
	}
}

// TestSpoolLockTimeout: a process that holds the spool directory's guard
// lock and never lets go does not stop streaming without a word: the wait
// ends with an error naming the lock file and its holder. Before, the flock
// waited for ever.
func TestSpoolLockTimeout(t *testing.T) {
	parent := t.TempDir()
	held, err := os.OpenFile(filepath.Join(parent, ".walbox-spool.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := syscall.Flock(int(held.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	s := newSpool(parent, 1<<20, newStreamMetrics(nil).spoolBytes)
	s.lockTimeout = 100 * time.Millisecond
	defer s.close()
	err = s.append(&decoder.StreamChange{TopXID: 7, XID: 7, Kind: 'I', LSN: 1, Data: []byte("I")})
	if !errors.Is(err, ErrSpoolUnwritable) || !strings.Contains(err.Error(), held.Name()) || !strings.Contains(err.Error(), "--spool-dir") {
		t.Fatalf("error %v, want ErrSpoolUnwritable naming the lock file and --spool-dir", err)
	}
	if _, statErr := os.Stat("/proc/locks"); statErr == nil && !strings.Contains(err.Error(), "process "+strconv.Itoa(os.Getpid())) {
		t.Errorf("error %v does not name the holder, process %d", err, os.Getpid())
	}
	syscall.Flock(int(held.Fd()), syscall.LOCK_UN)
	if err := s.append(&decoder.StreamChange{TopXID: 7, XID: 7, Kind: 'I', LSN: 1, Data: []byte("I")}); err != nil {
		t.Fatalf("once the lock is free: %v", err)
	}
}

// TestDefaultSpoolDirPerUser: the default spool directory is the user's
// own (not one /tmp/walbox-spool shared by every user of the host), made
// private, and refused when another user owns it.
func TestDefaultSpoolDirPerUser(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	dir := DefaultSpoolDir()
	if want := filepath.Join(os.TempDir(), "walbox-spool-"+strconv.Itoa(os.Getuid())); dir != want {
		t.Fatalf("DefaultSpoolDir() = %s, want %s", dir, want)
	}
	if err := os.Mkdir(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	change := &decoder.StreamChange{TopXID: 7, XID: 7, Kind: 'I', LSN: 1, Data: []byte("I")}
	s := newSpool(dir, 1<<20, newStreamMetrics(nil).spoolBytes)
	if err := s.append(change); err != nil {
		t.Fatal(err)
	}
	s.close()
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("default spool directory %v (%v), want mode 0700", fi.Mode(), err)
	}
	if os.Getuid() != 0 {
		t.Skip("giving the directory to another user needs root")
	}
	if err := os.Chown(dir, 4242, 4242); err != nil {
		t.Fatal(err)
	}
	s = newSpool(dir, 1<<20, newStreamMetrics(nil).spoolBytes)
	defer s.close()
	err := s.append(change)
	if !errors.Is(err, ErrSpoolUnwritable) || !strings.Contains(err.Error(), "uid 4242") || !strings.Contains(err.Error(), "--spool-dir") {
		t.Fatalf("error %v, want ErrSpoolUnwritable naming the owner and --spool-dir", err)
	}
	// An explicit --spool-dir is the operator's choice (a shared volume).
	other := newSpool(filepath.Join(t.TempDir(), "spool"), 1<<20, newStreamMetrics(nil).spoolBytes)
	defer other.close()
	if err := other.append(change); err != nil {
		t.Fatal(err)
	}
}

// TestStandbyDropsSpool: a relay that stands by (its slot taken, or fenced
// in exactly-once mode) keeps nothing of what its last session spooled;
// before, up to --spool-max-bytes stayed on disk for as long as it waited.
func TestStandbyDropsSpool(t *testing.T) {
	p := &fakeProducer{}
	l := streamingTestLoop(t, Config{}, p)
	l.wal(t, pgStreamStart(100, true))
	l.wal(t, inStream(100, pgRelation(outboxRel, "public", "outbox")))
	l.wal(t, inStream(100, pgInsert(outboxRel, "a", "agg", `{}`)))
	dir := l.stream.spool.dir
	if _, err := os.Stat(l.stream.spool.path(100)); err != nil {
		t.Fatal(err)
	}
	l.relay.enterStandby(errors.New("slot in use"))
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("the standby kept its spool %s: %v", dir, err)
	}
	if got := testutil.ToFloat64(l.stream.metrics.spoolBytes); got != 0 {
		t.Errorf("walbox_spool_bytes = %v while standing by", got)
	}
}

// TestXactEndBlind: a fallback whose transaction's status the server cannot
// be asked for (here: nothing listens) still ends, after
// unstreamBlindAfter, so protocol version 1 is never for good.
func TestXactEndBlind(t *testing.T) {
	defer func(d time.Duration) { unstreamBlindAfter = d }(unstreamBlindAfter)
	unstreamBlindAfter = 50 * time.Millisecond
	p := &fakeProducer{}
	l := streamingTestLoop(t, Config{}, p)
	w, stop := l.relay.watchXactEnd(t.Context(), 100, 10*time.Millisecond)
	defer stop()
	deadline := time.Now().Add(time.Minute)
	for w.end() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the fallback never ends while the server cannot be asked")
		}
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
	if w.end() != unstreamBlind {
		t.Fatalf("end %s, want unstreamBlind", w.end())
	}
	l.stream.unstream = unstreamState{xid: 100, watch: w}
	if !l.unstreamDone() {
		t.Error("the session does not end to stream again")
	}
}
