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

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/decoder"
)

// ErrSpoolFull is returned (wrapped) when a streamed transaction does not fit
// in Config.SpoolMaxBytes. It is permanent: the same transaction comes again
// after a restart, so the limit or the disk must change first. Nothing is
// dropped and nothing past the transaction is confirmed.
var ErrSpoolFull = errors.New("spool full")

// ErrSpoolUnwritable is returned (wrapped) when the spool directory cannot be
// created, locked or written.
var ErrSpoolUnwritable = errors.New("spool directory not writable")

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
	// dir is the process's own subdirectory, created on first use; lock
	// holds the flock on it.
	dir   string
	lock  *os.File
	files map[uint32]*spoolFile
	size  int64
	gauge prometheus.Gauge
}

// spoolFile is one streamed transaction's changes.
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
	// messages aside, msgs the offsets of the messages; dropped holds the
	// offsets of the messages rolled back, and pending the subtransactions
	// whose Stream Abort came since the last record or block.
	first   map[uint32]int64
	lastEnd map[uint32]int64
	topEnd  int64 // end of the last change of the top-level transaction
	msgs    []int64
	dropped map[int64]bool
	pending []uint32
}

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
		f.msgs = append(f.msgs, off)
		return
	case c.Kind == 'O':
		// Sent with a block's start, with no xid of its own.
		return
	case c.XID == c.TopXID:
		// No subtransaction was open: every later rollback starts
		// after this change, and the messages before it stay.
		f.topEnd = off + n
		clear(f.first)
		clear(f.lastEnd)
		f.msgs = f.msgs[:0]
		return
	}
	if _, ok := f.lastEnd[c.XID]; !ok {
		if len(f.lastEnd) >= maxTrackedSubXIDs {
			return
		}
		f.first[c.XID] = off
	}
	f.lastEnd[c.XID] = off + n
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
	bnd := f.topEnd
	for x, end := range f.lastEnd {
		if !f.aborted[x] && end > bnd {
			bnd = end
		}
	}
	kept := f.msgs[:0]
	var unclear []int64
	for _, o := range f.msgs {
		switch {
		case o >= cut:
			if f.dropped == nil {
				f.dropped = map[int64]bool{}
			}
			f.dropped[o] = true
		case o >= bnd:
			unclear = append(unclear, o)
			kept = append(kept, o)
		default:
			kept = append(kept, o)
		}
	}
	f.msgs = kept
	if len(unclear) > 0 {
		return fmt.Errorf("%w: streamed transaction %d rolled back subtransaction(s) %v, and %d logical decoding message(s) before their first change may have been emitted in them",
			errStreamAmbiguous, xid, pending, len(unclear))
	}
	return nil
}

// spoolHeaderLen is a record's header: Int32 data length, Int32 xid of the
// (sub)transaction, Int64 WAL start of the message.
const spoolHeaderLen = 4 + 4 + 8

func newSpool(parent string, limit int64, gauge prometheus.Gauge) *spool {
	return &spool{parent: parent, limit: limit, files: map[uint32]*spoolFile{}, gauge: gauge}
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
	// Held while removing the dead and creating and locking this one's
	// subdirectory: between its creation and its flock a subdirectory
	// looks dead to a process starting at the same time.
	guard, err := os.OpenFile(filepath.Join(s.parent, ".walbox-spool.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return s.unwritable(err)
	}
	defer guard.Close() // releases the flock
	if err := syscall.Flock(int(guard.Fd()), syscall.LOCK_EX); err != nil {
		return s.unwritable(fmt.Errorf("lock %s: %w", guard.Name(), err))
	}
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
	if _, err := os.Stat(s.parent); err != nil {
		return
	}
	guard, err := os.OpenFile(filepath.Join(s.parent, ".walbox-spool.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return
	}
	defer guard.Close()
	if syscall.Flock(int(guard.Fd()), syscall.LOCK_EX) != nil {
		return
	}
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
	return &spoolReader{r: bufio.NewReaderSize(f.f, 64<<10), aborted: f.aborted, dropped: f.dropped, top: xid}, nil
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
	dropped map[int64]bool // offsets of rolled back messages (spoolFile.resolve)
	off     int64
	top     uint32
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
			return nil, fmt.Errorf("read back streamed transaction %d from the spool: %w", sr.top, err)
		}
		n := int(binary.BigEndian.Uint32(hdr[0:]))
		if cap(sr.buf) < n {
			sr.buf = make([]byte, n)
		}
		sr.buf = sr.buf[:n]
		if _, err := io.ReadFull(sr.r, sr.buf); err != nil {
			return nil, fmt.Errorf("read back streamed transaction %d from the spool: %w", sr.top, err)
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
		if sr.change.Aborted(sr.aborted) || sr.dropped[off] {
			continue
		}
		return &sr.change, nil
	}
}
