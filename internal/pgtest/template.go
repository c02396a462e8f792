package pgtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// A new server's data directory is a copy of a template cluster that initdb
// made once per process and installation, not a fresh initdb: initdb costs
// about 1 CPU second (1 to 3 s under load), a copy on a tmpfs 0.05. Each
// copy gets a system identifier of its own (setSystemIdentifier), as initdb
// would give it: walbox tells clusters apart by it.

// initdbArgs are initdb's options after -D.
var initdbArgs = []string{
	"-U", "postgres",
	"--auth=trust",
	"--encoding=UTF8",
	"--locale=C",
	"--no-sync", // durability of a throwaway cluster is irrelevant; saves ~1s
}

// templatePrefix starts the name of a template's directory, followed by
// the pid and start time of the process that owns it (templateOwner).
const templatePrefix = "walbox-pgtmpl-"

type template struct {
	once    sync.Once
	dataDir string
	err     error
}

var templates struct {
	mu     sync.Mutex
	byBin  map[string]*template
	reaped bool
}

// templateDataDir returns the data directory of this process's template
// cluster for binDir, running initdb the first time. The template stays
// until the process ends; the next process that makes a template removes
// those of processes that are gone (reapTemplates).
func templateDataDir(ctx context.Context, binDir string, cred *credential) (string, error) {
	templates.mu.Lock()
	if templates.byBin == nil {
		templates.byBin = map[string]*template{}
	}
	tm := templates.byBin[binDir]
	if tm == nil {
		tm = &template{}
		templates.byBin[binDir] = tm
	}
	reap := !templates.reaped
	templates.reaped = true
	templates.mu.Unlock()

	tm.once.Do(func() {
		owner, err := templateOwner(os.Getpid())
		if err != nil {
			tm.err = err
			return
		}
		root, err := makeRootPrefix(cred, templatePrefix+owner+"-")
		if err != nil {
			tm.err = err
			return
		}
		if reap {
			reapTemplates(filepath.Dir(root))
		}
		s := &Server{binDir: binDir, root: root, cred: cred}
		dataDir := filepath.Join(root, "data")
		out, err := s.run(ctx, filepath.Join(binDir, "initdb"), append([]string{"-D", dataDir}, initdbArgs...)...)
		if err != nil {
			_ = os.RemoveAll(root)
			tm.err = fmt.Errorf("pgtest: initdb: %w\n%s", err, tail(out, 30))
			return
		}
		removeAtExit(root)
		tm.dataDir = dataDir
	})
	if tm.err != nil {
		err := tm.err
		templates.mu.Lock()
		if templates.byBin[binDir] == tm && tm.dataDir == "" {
			// Not kept: the next server tries initdb again (this one's ctx
			// may have ended).
			delete(templates.byBin, binDir)
		}
		templates.mu.Unlock()
		return "", err
	}
	return tm.dataDir, nil
}

// removeAtExit removes dir once this process has ended, however it ends: a
// shell waits for the end of a pipe that only this process holds open.
// (reapTemplates removes what a killed shell left.)
func removeAtExit(dir string) {
	cmd := exec.Command("sh", "-c", `read _; rm -rf "$1"`, "sh", dir)
	cmd.Env = childEnv()
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // not ended by a Ctrl-C meant for us
	w, err := cmd.StdinPipe()
	if err != nil {
		return
	}
	if err := cmd.Start(); err != nil {
		return
	}
	go func() {
		_ = cmd.Wait() // never returns while we run: the shell waits for us
		_ = w.Close()  // w is kept open, and reachable, until then
	}()
}

// templateOwner names process pid by its pid and its start time (clock
// ticks since boot, /proc/<pid>/stat's 22nd field), which a reused pid does
// not repeat.
func templateOwner(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", fmt.Errorf("pgtest: %w", err)
	}
	// The command name, field 2, is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", fmt.Errorf("pgtest: /proc/%d/stat: no command name: %q", pid, b)
	}
	fields := strings.Fields(string(b[i+1:]))
	if len(fields) < 20 {
		return "", fmt.Errorf("pgtest: /proc/%d/stat: %d fields after the command name, want at least 20", pid, len(fields))
	}
	return strconv.Itoa(pid) + "-" + fields[19], nil
}

var templateName = regexp.MustCompile(`^` + templatePrefix + `([0-9]+)-([0-9]+)-`)

// reapTemplates removes the templates in base whose process has ended.
func reapTemplates(base string) {
	entries, err := os.ReadDir(base)
	if err != nil {
		return
	}
	for _, e := range entries {
		m := templateName.FindStringSubmatch(e.Name())
		if m == nil || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(m[1])
		if err != nil {
			continue
		}
		if owner, err := templateOwner(pid); err == nil && owner == m[1]+"-"+m[2] {
			continue // still running
		}
		_ = os.RemoveAll(filepath.Join(base, e.Name())) // another user's: not ours to remove
	}
}

// initFromTemplate makes s.dataDir a copy of the template for s.binDir with
// a new system identifier.
func (s *Server) initFromTemplate(ctx context.Context) error {
	tmpl, err := templateDataDir(ctx, s.binDir, s.cred)
	if err != nil {
		return err
	}
	// As the server's account, so ownership and modes carry over.
	if out, err := s.run(ctx, "cp", "-a", tmpl, s.dataDir); err != nil {
		return fmt.Errorf("pgtest: copy the template cluster %s: %w\n%s", tmpl, err, out)
	}
	return setSystemIdentifier(s.dataDir, newSystemIdentifier())
}

// newSystemIdentifier returns a system identifier the way initdb makes one:
// the time in seconds and microseconds, and 12 bits that initdb takes from
// its pid (random here, as the copies are made by one process).
func newSystemIdentifier() uint64 {
	now := time.Now()
	return uint64(now.Unix())<<32 | uint64(now.Nanosecond()/1000)<<12 | rand.Uint64N(1<<12)
}

// setSystemIdentifier gives the cluster in dataDir the system identifier
// id: in pg_control (its first field, followed by a CRC-32C of the fields
// before the CRC) and in the long header of every WAL segment, which
// startup checks against pg_control. It works on every major version: the
// CRC's offset is found, not assumed.
func setSystemIdentifier(dataDir string, id uint64) error {
	controlPath := filepath.Join(dataDir, "global", "pg_control")
	control, err := os.ReadFile(controlPath)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if len(control) < 16 {
		return fmt.Errorf("pgtest: %s: %d bytes, too short for a control file", controlPath, len(control))
	}
	old := binary.LittleEndian.Uint64(control)
	crcAt := controlCRCOffset(control)
	if crcAt < 0 {
		return fmt.Errorf("pgtest: %s: no CRC-32C of the bytes before it found: not a PostgreSQL control file, or not little-endian", controlPath)
	}

	walDir := filepath.Join(dataDir, "pg_wal")
	segments, err := os.ReadDir(walDir)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	var old8, new8 [8]byte
	binary.LittleEndian.PutUint64(old8[:], old)
	binary.LittleEndian.PutUint64(new8[:], id)
	patched := 0
	for _, e := range segments {
		if len(e.Name()) != 24 || strings.Trim(e.Name(), "0123456789ABCDEF") != "" {
			continue
		}
		if err := patchSegment(filepath.Join(walDir, e.Name()), old8, new8); err != nil {
			return err
		}
		patched++
	}
	if patched == 0 {
		return fmt.Errorf("pgtest: %s holds no WAL segment to give system identifier %d", walDir, id)
	}

	copy(control, new8[:])
	binary.LittleEndian.PutUint32(control[crcAt:], crc32.Checksum(control[:crcAt], crc32.MakeTable(crc32.Castagnoli)))
	if err := os.WriteFile(controlPath, control, 0); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// controlCRCOffset returns the offset of pg_control's CRC: the first
// 4-byte-aligned position n whose 4 bytes hold the CRC-32C of the n bytes
// before it (ControlFileData ends with it), or -1.
func controlCRCOffset(control []byte) int {
	table := crc32.MakeTable(crc32.Castagnoli)
	for n := 8; n+4 <= len(control); n += 4 {
		if crc32.Checksum(control[:n], table) == binary.LittleEndian.Uint32(control[n:]) {
			return n
		}
	}
	return -1
}

// walSysIDOffset is the offset of xlp_sysid in a WAL segment's first page
// (XLogLongPageHeaderData: the 24-byte XLogPageHeaderData first).
const walSysIDOffset = 24

// patchSegment replaces the system identifier old with id in the long page
// header of the WAL segment at path. A segment not written yet (zeros
// there) is left alone.
func patchSegment(path string, old, id [8]byte) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	var got [8]byte
	_, err = f.ReadAt(got[:], walSysIDOffset)
	switch {
	case err != nil:
		err = fmt.Errorf("pgtest: WAL segment %s: %w", path, err)
	case got == old:
		if _, err = f.WriteAt(id[:], walSysIDOffset); err != nil {
			err = fmt.Errorf("pgtest: WAL segment %s: %w", path, err)
		}
	case got != [8]byte{}:
		err = fmt.Errorf("pgtest: WAL segment %s: system identifier %d, pg_control says %d",
			path, binary.LittleEndian.Uint64(got[:]), binary.LittleEndian.Uint64(old[:]))
	}
	return errors.Join(err, f.Close())
}
