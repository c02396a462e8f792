package pipeline

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/decoder"
)

// ErrSpoolFull is returned (wrapped) when a streamed transaction does not fit
// in Config.SpoolMaxBytes. Streaming cannot deliver it (the same transaction
// comes again after a restart), so the relay sends it again with protocol
// version 1 (stream.go's unstreamable). Nothing is dropped and nothing past
// the transaction is confirmed.
var ErrSpoolFull = errors.New("spool full")

// ErrSpoolUnwritable is returned (wrapped) when the spool directory cannot be
// created, locked, written or read back (a full disk, a read-only mount,
// permissions, too many open files). The relay does not stop on it: like a
// full spool, it sends the transaction again with protocol version 1
// (stream.go's unstreamable), counted in walbox_spool_errors_total. It is no
// network error: IsRetryable reports false for it when it is not turned
// into such a reconnect.
var ErrSpoolUnwritable = errors.New("spool directory not writable")

// DefaultSpoolDir returns the spool directory used when none is given:
// "walbox-spool-<uid>" in os.TempDir() ($TMPDIR, else /tmp). One per user, so
// that users of one host do not share (or block) one another's spool; walbox
// creates it with mode 0700 and refuses it when another user owns it.
func DefaultSpoolDir() string {
	return filepath.Join(os.TempDir(), "walbox-spool-"+strconv.Itoa(os.Getuid()))
}

// spoolLockTimeout bounds the wait for the spool directory's guard lock,
// which a process holds only while it creates its subdirectory or removes a
// dead one's: a process that holds it longer is stuck (or stopped), and
// waiting for it without end would stop streaming without a word. The loop
// goroutine waits, so the bound stays well below wal_sender_timeout.
const spoolLockTimeout = 10 * time.Second

// spool keeps the changes of streamed in-progress transactions on disk until
// their Stream Commit, one file per top-level transaction, so that memory
// does not grow with a transaction's size and nothing reaches Kafka before
// Postgres commits.
//
// It is disposable: after a crash the slot sends every uncommitted
// transaction again from its start, so nothing in it is ever read back
// across sessions. Each process spools under a subdirectory of its own,
// holding an exclusive flock on its "lock" file; a process that finds a
// sibling whose lock it can take knows its owner is dead and removes it. So
// a --standby instance sharing the directory never deletes the active one's
// files.
//
// Owned by the loop goroutine; not safe for concurrent use.
type spool struct {
	parent string
	limit  int64
	// private is set for DefaultSpoolDir: walbox creates it, and it must
	// be this user's alone.
	private bool
	// lockTimeout bounds the wait for the guard lock (spoolLockTimeout).
	lockTimeout time.Duration
	// dir is the process's own subdirectory, created on first use; lock
	// holds the flock on it.
	dir   string
	lock  *os.File
	files map[uint32]*spoolFile
	size  int64
	gauge prometheus.Gauge
}

// spoolFile is one streamed transaction's changes.
//
// Its memory does not grow with the transaction: what resolve needs is kept
// per subtransaction (bounded by maxTrackedSubXIDs), never per record or per
// message; the records themselves are on disk.
type spoolFile struct {
	f    *os.File
	w    *bufio.Writer
	size int64
	// aborted holds the subtransactions rolled back so far.
	aborted map[uint32]bool
	// Inside a stream the server tags a transactional logical decoding
	// message with the top-level xid, whichever subtransaction emitted
	// it, so a rolled back subtransaction's messages are found by their
	// position instead (see resolve). Since the top-level transaction's
	// last change (ending at topEnd), first holds the offset of each
	// subtransaction's first record and lastEnd the end of its last one,
	// messages aside; segs cuts that stretch at each first record, and
	// knows of the messages in each piece only the offset of the last;
	// dropped holds the offset ranges whose messages were rolled back,
	// and pending the subtransactions whose Stream Abort came since the
	// last record or block.
	first   map[uint32]int64
	lastEnd map[uint32]int64
	topEnd  int64 // end of the last change of the top-level transaction
	// kept is the end of the last change of the top-level transaction or
	// of a tracked subtransaction not rolled back: resolve's bnd, kept as
	// records come, so a rollback costs O(1) whatever the subtransactions.
	kept    int64
	segs    []msgSeg
	dropped []offsetRange
	pending []uint32
}

// msgSeg is the stretch of a spool file from start (topEnd, or a
// subtransaction's first record) to the next segment's start; last is the
// offset of its last logical decoding message, -1 when it has none. A
// rollback's cut is always a segment's start (resolve), so the messages of a
// segment are rolled back all together or not at all, and only the last one
// matters for the rest.
type msgSeg struct {
	start, last int64
	// keptBefore is spoolFile.kept when the segment started: what kept
	// is again when the segment's subtransaction rolls back.
	keptBefore int64
}

// offsetRange is the offsets [from, to) of a spool file.
type offsetRange struct{ from, to int64 }

// maxTrackedSubXIDs bounds the subtransactions a spool file follows for
// resolve since the last change of the top-level transaction (a PL/pgSQL
// loop with an EXCEPTION block makes one per iteration). Past it, resolve
// knows less and may send the transaction again whole (errStreamAmbiguous),
// never decide wrongly.
const maxTrackedSubXIDs = 1 << 16

// track notes the position of change c, n bytes, about to be written at
// the end of f, for resolve.
func (f *spoolFile) track(c *decoder.StreamChange, n int64) {
	off := f.size
	switch {
	case c.Kind == 'M':
		if len(f.segs) == 0 {
			f.segs = append(f.segs, msgSeg{start: f.topEnd, last: -1, keptBefore: f.kept})
		}
		f.segs[len(f.segs)-1].last = off
		return
	case c.Kind == 'O':
		// Sent with a block's start, with no xid of its own.
		return
	case c.XID == c.TopXID:
		// No subtransaction was open: every later rollback starts
		// after this change, and the messages before it stay.
		f.topEnd = off + n
		f.kept = f.topEnd
		clear(f.first)
		clear(f.lastEnd)
		f.segs = f.segs[:0]
		return
	}
	if _, ok := f.lastEnd[c.XID]; !ok {
		if len(f.lastEnd) >= maxTrackedSubXIDs {
			return
		}
		f.first[c.XID] = off
		f.segs = append(f.segs, msgSeg{start: off, last: -1, keptBefore: f.kept})
	}
	f.lastEnd[c.XID] = off + n
	f.kept = off + n
}

// drop marks the messages in [from, to) as rolled back. A range is only ever
// added up to the end of the file, so it covers every range from its start
// on: dropped stays sorted and disjoint, one range per rollback at most.
func (f *spoolFile) drop(from, to int64) {
	i := len(f.dropped)
	for i > 0 && f.dropped[i-1].from >= from {
		i--
	}
	f.dropped = f.dropped[:i]
	if i > 0 && f.dropped[i-1].to >= from {
		f.dropped[i-1].to = to
		return
	}
	f.dropped = append(f.dropped, offsetRange{from, to})
}

// errStreamAmbiguous is returned (wrapped) when a subtransaction of a
// streamed transaction rolled back, and a logical decoding message spooled
// before its first change may or may not have been emitted in it: the
// stream does not say. Only the transaction decoded whole at its commit
// (protocol version 1) tells.
var errStreamAmbiguous = errors.New("rolled back subtransaction with messages the stream cannot attribute")

// resolve decides which spooled messages the subtransactions in pending
// rolled back. When the server sends the Stream Abort of a subtransaction,
// everything of the transaction streamed since that subtransaction's first
// record belongs to it or its own subtransactions: it was open until the
// abort, and the stream is in WAL order. Every Stream Abort of one rollback
// (one per rolled back subtransaction with streamed changes) comes in a
// row, before any later record, so pending is one rolled back tree. Its
// records start at or before the first record tagged with any of its xids
// (cut), and after the last record of an xid never rolled back (bnd): a
// message at or after cut is rolled back, one before bnd is kept, and one
// in between cannot be told.
func (f *spoolFile) resolve(xid uint32) error {
	if len(f.pending) == 0 {
		return nil
	}
	pending := f.pending
	f.pending = nil
	cut := f.size
	for _, sub := range pending {
		if o, ok := f.first[sub]; ok && o < cut {
			cut = o
		}
	}
	// Every cut is the first record of a tracked subtransaction, where a
	// segment starts: the segments from it on hold the messages rolled
	// back, those before it the messages kept.
	i := len(f.segs)
	for i > 0 && f.segs[i-1].start >= cut {
		i--
	}
	// bnd is the end of the last record of the top-level transaction or
	// of a tracked subtransaction not rolled back. Everything from cut on
	// is the rolled back tree's (it was the innermost open until its
	// abort), so that is the last such record before cut: kept when the
	// tree's first segment started, and kept as it is when no tracked
	// subtransaction rolled back (cut is the end).
	if f.kept > cut {
		if i < len(f.segs) && f.segs[i].start == cut {
			f.kept = f.segs[i].keptBefore
		} else {
			f.kept = f.topEnd // never seen: the earliest it can be
		}
	}
	bnd := f.kept
	for _, sg := range f.segs[i:] {
		if sg.last >= 0 {
			f.drop(cut, f.size)
			break
		}
	}
	f.segs = f.segs[:i]
	for j := len(f.segs) - 1; j >= 0; j-- {
		if last := f.segs[j].last; last >= 0 {
			if last >= bnd {
				return fmt.Errorf("%w: streamed transaction %d rolled back subtransaction(s) %v, and logical decoding message(s) before their first change may have been emitted in them",
					errStreamAmbiguous, xid, pending)
			}
			break
		}
	}
	return nil
}

// spoolHeaderLen is a record's header: Int32 data length, Int32 xid of the
// (sub)transaction, Int64 WAL start of the message.
const spoolHeaderLen = 4 + 4 + 8

func newSpool(parent string, limit int64, gauge prometheus.Gauge) *spool {
	return &spool{parent: parent, limit: limit, files: map[uint32]*spoolFile{}, gauge: gauge,
		private: parent == DefaultSpoolDir(), lockTimeout: spoolLockTimeout}
}

// checkPrivate refuses DefaultSpoolDir when it is not this user's own
// directory (another user created it, or it is a symbolic link), and takes
// the group's and others' access away: the default lies in a directory
// every user of the host can write.
func (s *spool) checkPrivate() error {
	if !s.private {
		return nil
	}
	fi, err := os.Lstat(s.parent)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%s is not a directory (a symbolic link, say), so another user may control it; remove it, or set --spool-dir to a directory of your own", s.parent)
	case ok && int(st.Uid) != os.Getuid():
		return fmt.Errorf("%s belongs to uid %d, not to walbox's uid %d; remove it, or set --spool-dir to a directory of your own", s.parent, st.Uid, os.Getuid())
	case fi.Mode().Perm()&0o077 != 0:
		if err := os.Chmod(s.parent, 0o700); err != nil {
			return fmt.Errorf("take the group's and others' access to %s away: %w", s.parent, err)
		}
	}
	return nil
}

// lockGuard takes the exclusive flock of the spool directory's guard file,
// waiting at most s.lockTimeout.
func (s *spool) lockGuard() (*os.File, error) {
	path := filepath.Join(s.parent, ".walbox-spool.lock")
	guard, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(s.lockTimeout)
	for wait := time.Millisecond; ; wait = min(2*wait, 100*time.Millisecond) {
		err := syscall.Flock(int(guard.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return guard, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			guard.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			holder := lockHolder(guard)
			guard.Close()
			return nil, fmt.Errorf("lock %s: held for more than %s by %s, which takes it only while it sets up its own spool; stop that process if it hangs, or give this walbox another --spool-dir",
				path, s.lockTimeout, holder)
		}
		time.Sleep(wait)
	}
}

// lockHolder names the process holding a flock on f, as /proc/locks tells
// (Linux); "another process" when it cannot tell.
func lockHolder(f *os.File) string {
	fi, err := f.Stat()
	st, ok := fi.Sys().(*syscall.Stat_t)
	if err != nil || !ok {
		return "another process"
	}
	data, err := os.ReadFile("/proc/locks")
	if err != nil {
		return "another process"
	}
	// "1: FLOCK  ADVISORY  WRITE 1234 00:2a:5678 0 EOF": pid, then
	// major:minor:inode.
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 6 || fields[1] != "FLOCK" {
			continue
		}
		dev := strings.Split(fields[5], ":")
		if len(dev) != 3 || dev[2] != strconv.FormatUint(st.Ino, 10) {
			continue
		}
		pid := fields[4]
		if cmd, err := os.ReadFile("/proc/" + pid + "/comm"); err == nil {
			return "process " + pid + " (" + strings.TrimSpace(string(cmd)) + ")"
		}
		return "process " + pid
	}
	return "another process"
}

// ensureDir creates the process's subdirectory, removing those of dead
// processes first.
func (s *spool) ensureDir() error {
	if s.dir != "" {
		return nil
	}
	if err := os.MkdirAll(s.parent, 0o700); err != nil {
		return s.unwritable(err)
	}
	if err := s.checkPrivate(); err != nil {
		return s.unwritable(err)
	}
	// Held while removing the dead and creating and locking this one's
	// subdirectory: between its creation and its flock a subdirectory
	// looks dead to a process starting at the same time.
	guard, err := s.lockGuard()
	if err != nil {
		return s.unwritable(err)
	}
	defer guard.Close() // releases the flock
	s.removeDead()
	dir, err := os.MkdirTemp(s.parent, "walbox-"+strconv.Itoa(os.Getpid())+"-")
	if err != nil {
		return s.unwritable(err)
	}
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		_ = os.RemoveAll(dir)
		return s.unwritable(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		_ = os.RemoveAll(dir)
		return s.unwritable(fmt.Errorf("lock %s: %w", dir, err))
	}
	s.dir, s.lock = dir, lock
	return nil
}

// cleanup removes what dead processes left under the spool directory, at
// start: the subdirectory of this process is created only with the first
// streamed transaction, which may never come. Failures are ignored, as in
// removeDead; a directory that does not exist holds nothing.
func (s *spool) cleanup() {
	if _, err := os.Stat(s.parent); err != nil || s.checkPrivate() != nil {
		return
	}
	guard, err := s.lockGuard()
	if err != nil {
		return
	}
	defer guard.Close()
	s.removeDead()
}

// removeDead deletes the subdirectories of processes that no longer hold
// their lock. Failures are ignored: what is left is only disk space, and the
// next start tries again.
func (s *spool) removeDead() {
	entries, err := os.ReadDir(s.parent)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "walbox-") {
			continue
		}
		dir := filepath.Join(s.parent, e.Name())
		lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDWR, 0)
		if errors.Is(err, fs.ErrNotExist) {
			// Killed between creating the directory and its lock, or
			// not walbox's: only remove what looks like a spool.
			if onlySpoolFiles(dir) {
				_ = os.RemoveAll(dir)
			}
			continue
		}
		if err != nil {
			continue
		}
		if syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB) == nil {
			_ = os.RemoveAll(dir)
		}
		lock.Close()
	}
}

func onlySpoolFiles(dir string) bool {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".spool") {
			return false
		}
	}
	return true
}

func (s *spool) unwritable(err error) error {
	return fmt.Errorf("%w: %s (--spool-dir): %w; streamed transactions are kept there until they commit, so make it writable or point --spool-dir at a writable directory",
		ErrSpoolUnwritable, s.parent, err)
}

// start begins a stream block of xid. The first block of a transaction
// drops whatever an earlier session kept of it.
func (s *spool) start(xid uint32, first bool) error {
	if first {
		s.drop(xid)
		return nil
	}
	if f := s.files[xid]; f != nil {
		return f.resolve(xid)
	}
	return nil
}

// append writes one streamed change to its transaction's file.
func (s *spool) append(c *decoder.StreamChange) error {
	n := int64(spoolHeaderLen + len(c.Data))
	if s.size+n > s.limit {
		return fmt.Errorf("%w: streamed transaction %d (change at %s) needs more than --spool-max-bytes (%d bytes) in %s; raise --spool-max-bytes, with as much free disk space under --spool-dir: the transaction is sent again from its start after a restart, nothing of it or after it was confirmed",
			ErrSpoolFull, c.TopXID, c.LSN, s.limit, s.parent)
	}
	f := s.files[c.TopXID]
	if f == nil {
		if err := s.ensureDir(); err != nil {
			return err
		}
		file, err := os.OpenFile(s.path(c.TopXID), os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
		if errors.Is(err, fs.ErrNotExist) {
			// The subdirectory was removed under this process (a /tmp
			// cleaner, an operator): make a new one. The files still
			// open in the old one stay readable through their
			// descriptors.
			s.lock.Close()
			s.dir, s.lock = "", nil
			if err := s.ensureDir(); err != nil {
				return err
			}
			file, err = os.OpenFile(s.path(c.TopXID), os.O_CREATE|os.O_TRUNC|os.O_RDWR, 0o600)
		}
		if err != nil {
			return s.unwritable(err)
		}
		// A small buffer per open transaction: many may stream at once,
		// and the kernel's page cache batches the writes anyway.
		f = &spoolFile{f: file, w: bufio.NewWriterSize(file, 8<<10), first: map[uint32]int64{}, lastEnd: map[uint32]int64{}}
		s.files[c.TopXID] = f
	}
	if err := f.resolve(c.TopXID); err != nil {
		return err
	}
	f.track(c, n)
	var hdr [spoolHeaderLen]byte
	binary.BigEndian.PutUint32(hdr[0:], uint32(len(c.Data)))
	binary.BigEndian.PutUint32(hdr[4:], c.XID)
	binary.BigEndian.PutUint64(hdr[8:], uint64(c.LSN))
	if _, err := f.w.Write(hdr[:]); err != nil {
		return s.unwritable(err)
	}
	if _, err := f.w.Write(c.Data); err != nil {
		return s.unwritable(err)
	}
	f.size += n
	s.size += n
	s.gauge.Set(float64(s.size))
	return nil
}

// abortSub records that subtransaction sub of xid rolled back: its changes
// are skipped when the transaction is read back.
func (s *spool) abortSub(xid, sub uint32) {
	f := s.files[xid]
	if f == nil {
		return // it had no change walbox keeps
	}
	if f.aborted == nil {
		f.aborted = map[uint32]bool{}
	}
	f.aborted[sub] = true
	f.pending = append(f.pending, sub)
}

// drop deletes what is kept of xid (a whole abort, or a new first block).
func (s *spool) drop(xid uint32) {
	f := s.files[xid]
	if f == nil {
		return
	}
	delete(s.files, xid)
	f.f.Close()
	_ = os.Remove(f.f.Name())
	s.size -= f.size
	s.gauge.Set(float64(s.size))
}

// open returns a reader of xid's changes in the order they came, or nil if
// none was kept. The file stays counted and on disk until drop.
func (s *spool) open(xid uint32) (*spoolReader, error) {
	f := s.files[xid]
	if f == nil {
		return nil, nil
	}
	if err := f.resolve(xid); err != nil {
		return nil, err
	}
	if err := f.w.Flush(); err != nil {
		return nil, s.unwritable(err)
	}
	if _, err := f.f.Seek(0, io.SeekStart); err != nil {
		return nil, s.unwritable(err)
	}
	return &spoolReader{r: bufio.NewReaderSize(f.f, 64<<10), aborted: f.aborted, dropped: f.dropped, top: xid, dir: s.parent}, nil
}

// reset drops every transaction: a new session sends them again.
func (s *spool) reset() {
	for xid := range s.files {
		s.drop(xid)
	}
}

// close drops everything and removes the process's subdirectory.
func (s *spool) close() {
	s.reset()
	if s.dir != "" {
		_ = os.RemoveAll(s.dir)
		s.lock.Close()
		s.dir, s.lock = "", nil
	}
}

func (s *spool) path(xid uint32) string {
	return filepath.Join(s.dir, strconv.FormatUint(uint64(xid), 10)+".spool")
}

// spoolReader reads one transaction's changes back. The Data of the change
// it returns is valid until the next call (Decode copies what it keeps).
type spoolReader struct {
	r       *bufio.Reader
	aborted map[uint32]bool
	// dropped holds the offset ranges of rolled back messages
	// (spoolFile.resolve), sorted; the ones before off are skipped.
	dropped []offsetRange
	off     int64
	top     uint32
	dir     string // --spool-dir, for errors
	buf     []byte
	change  decoder.StreamChange
}

// next returns the next change not rolled back with its subtransaction, or
// io.EOF at the end.
func (sr *spoolReader) next() (*decoder.StreamChange, error) {
	for {
		var hdr [spoolHeaderLen]byte
		if _, err := io.ReadFull(sr.r, hdr[:]); err != nil {
			if err == io.EOF {
				return nil, io.EOF
			}
			return nil, sr.readErr(err)
		}
		n := int(binary.BigEndian.Uint32(hdr[0:]))
		if cap(sr.buf) < n {
			sr.buf = make([]byte, n)
		}
		sr.buf = sr.buf[:n]
		if _, err := io.ReadFull(sr.r, sr.buf); err != nil {
			return nil, sr.readErr(err)
		}
		sr.change = decoder.StreamChange{
			TopXID: sr.top, XID: binary.BigEndian.Uint32(hdr[4:]),
			LSN: pglogrepl.LSN(binary.BigEndian.Uint64(hdr[8:])), Data: sr.buf,
		}
		if n > 0 {
			sr.change.Kind = sr.buf[0]
		}
		off := sr.off
		sr.off += int64(spoolHeaderLen + n)
		if sr.change.Aborted(sr.aborted) || sr.change.Kind == 'M' && sr.droppedAt(off) {
			continue
		}
		return &sr.change, nil
	}
}

// droppedAt reports whether the message at off was rolled back; offsets
// come in increasing order.
func (sr *spoolReader) droppedAt(off int64) bool {
	for len(sr.dropped) > 0 && sr.dropped[0].to <= off {
		sr.dropped = sr.dropped[1:]
	}
	return len(sr.dropped) > 0 && sr.dropped[0].from <= off
}

func (sr *spoolReader) readErr(err error) error {
	return fmt.Errorf("%w: read back streamed transaction %d from the spool in %s (--spool-dir): %w; check the disk behind it",
		ErrSpoolUnwritable, sr.top, sr.dir, err)
}
