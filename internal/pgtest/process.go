package pgtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// credential is the OS account the server runs as when we are root; nil
// means "as ourselves".
type credential struct{ uid, gid uint32 }

// serverCredential returns the `postgres` account when running as root,
// since initdb and postgres refuse to run as root.
func serverCredential() (*credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("%w: running as root, which PostgreSQL refuses, and there is no `postgres` account to run it as: %v", ErrUnavailable, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("pgtest: account postgres: %w", err)
	}
	return &credential{uid: uint32(uid), gid: uint32(gid)}, nil
}

func (c *credential) chown(path string) error {
	if c == nil {
		return nil
	}
	if err := os.Chown(path, int(c.uid), int(c.gid)); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	return nil
}

// sysProcAttr puts the child in its own process group, so a Ctrl-C meant for
// the test or demo does not shut postgres down behind the caller's back, and
// (on Linux, see setParentDeathSignal) asks the kernel to send SIGQUIT, an
// immediate shutdown, if we die first.
func (c *credential) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(attr)
	if c != nil {
		// Go sets the parent-death signal after switching credentials, which
		// would otherwise clear it.
		attr.Credential = &syscall.Credential{Uid: c.uid, Gid: c.gid}
	}
	return attr
}

// maxSocketDir keeps "<dir>/.s.PGSQL.65535" under the 107-byte limit of a
// unix socket path.
const maxSocketDir = 90

// TmpDirEnv names the environment variable that chooses where servers keep
// their data, overriding the search in makeRoot.
const TmpDirEnv = "WALBOX_PGTEST_TMPDIR"

// shmDir is a tmpfs on most Linux systems. initdb is about twice as fast
// there as on a disk (ext4 on a VM disk: 2.5 s against 1.1 s), and the
// servers hold no data worth a disk.
const shmDir = "/dev/shm"

// minShmFree is the free space /dev/shm needs before pgtest uses it: Docker
// gives containers a 64 MiB /dev/shm, too small for a 40 MiB cluster plus
// the server's own dynamic shared memory.
const minShmFree = 1 << 30

// makeRoot creates the server's temporary directory, owned by the server's
// account. The base is $WALBOX_PGTEST_TMPDIR if set, else /dev/shm if it is
// large enough, else os.TempDir(), else /tmp. When running as root the
// directory must be reachable by the postgres account, so a base whose
// ancestors are not world-traversable (TMPDIR=/root/tmp) is skipped.
func makeRoot(c *credential) (string, error) {
	return makeRootPrefix(c, "walbox-pg-")
}

// makeRootPrefix is makeRoot for a directory whose name starts with prefix.
func makeRootPrefix(c *credential, prefix string) (string, error) {
	var bases []string
	if env := os.Getenv(TmpDirEnv); env != "" {
		bases = []string{env}
	} else {
		var st syscall.Statfs_t
		if syscall.Statfs(shmDir, &st) == nil && st.Bavail*uint64(st.Bsize) >= minShmFree {
			bases = append(bases, shmDir)
		}
		bases = append(bases, os.TempDir(), "/tmp")
	}
	var tried []string
	for _, base := range bases {
		if len(base) > maxSocketDir-20 {
			tried = append(tried, base+" (path too long for a unix socket)")
			continue
		}
		if c != nil && !traversable(base) {
			tried = append(tried, base+" (not traversable by the postgres account)")
			continue
		}
		root, err := os.MkdirTemp(base, prefix)
		if err != nil {
			return "", fmt.Errorf("pgtest: %w", err)
		}
		if err := c.chown(root); err != nil {
			_ = os.RemoveAll(root)
			return "", err
		}
		return root, nil
	}
	return "", fmt.Errorf("pgtest: no usable temporary directory: %s", strings.Join(tried, "; "))
}

// traversable reports whether every directory from dir up to / can be
// searched by other users.
func traversable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// childEnv is our environment without PG* variables (PGDATA, PGPORT, ...)
// that could point the server's tools at another cluster.
func childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			env = append(env, kv)
		}
	}
	return append(env, "LC_ALL=C")
}

// run runs a short-lived tool (initdb) as the server's account. The OS
// thread stays locked while it runs: the parent-death signal fires when the
// thread that forked the child exits, and a thread the runtime later hands
// to a goroutine that locks it and ends (spawn's, once its postmaster has
// exited) would take the tool down with it: initdb then reports "caught
// signal" (its SIGQUIT handler) halfway through its bootstrap.
func (s *Server) run(ctx context.Context, path string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Dir = s.root // the caller's working directory may be unreadable to postgres
	cmd.Env = childEnv()
	cmd.SysProcAttr = s.cred.sysProcAttr()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.CombinedOutput()
}

// proc is one run of the postmaster.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the process has exited and been reaped
	err  error         // Wait's result; read only after done is closed
}

// spawn starts the postmaster. The goroutine that starts it keeps its OS
// thread locked until the child exits: Linux sends the parent-death signal
// when the *thread* that forked the child exits, and the Go runtime may
// retire idle threads.
func (s *Server) spawn(logFile *os.File) (*proc, error) {
	p := &proc{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine, after the child
		cmd := exec.Command(filepath.Join(s.binDir, "postgres"),
			append([]string{"-D", s.dataDir, "-p", strconv.Itoa(s.port)}, s.cmdLine...)...,
		)
		cmd.Dir = s.root
		cmd.Env = childEnv()
		cmd.Stdout = logFile
		cmd.Stderr = logFile
		cmd.SysProcAttr = s.cred.sysProcAttr()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.cmd = cmd
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill ends the server however it can: SIGQUIT first (postmaster takes its
// backends down and removes its pid file), then SIGKILL to the whole process
// group.
func (p *proc) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-p.done:
		return
	case <-time.After(5 * time.Second):
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// errPortInUse marks a start that failed because the port was taken.
var errPortInUse = errors.New("port already in use")

// defaultStartTimeout bounds startup when ctx has no deadline.
const defaultStartTimeout = 60 * time.Second

// startLocked starts the postmaster and waits until it accepts connections.
// s.mu must be held.
func (s *Server) startLocked(ctx context.Context) error {
	if s.closed {
		return errors.New("pgtest: start on a closed server")
	}
	if s.proc != nil {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	var logStart int64
	if fi, err := logFile.Stat(); err == nil {
		logStart = fi.Size()
	}
	p, err := s.spawn(logFile)
	_ = logFile.Close() // the child holds its own descriptor
	if err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	if err := s.waitReady(ctx, p); err != nil {
		p.kill()
		log := s.logSince(logStart)
		if strings.Contains(log, "could not bind") || strings.Contains(log, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return fmt.Errorf("pgtest: postgres on port %d did not start: %w\n--- server log (%s) ---\n%s",
			s.port, err, s.logPath, tail([]byte(log), 30))
	}
	s.proc = p
	return nil
}

// waitReady polls the server's unix socket, which lives in our own temp dir
// and so cannot belong to another server, until a connection succeeds.
func (s *Server) waitReady(ctx context.Context, p *proc) error {
	dsn := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=2", s.root, s.port)
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("postgres exited: %v", p.err)
		}
		conn, err := pgconn.Connect(ctx, dsn)
		if err == nil {
			return conn.Close(ctx)
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last attempt: %v)", ctx.Err(), lastErr)
		case <-p.done:
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// signals of the two shutdown modes, as pg_ctl sends them.
const (
	sigFast      = syscall.SIGINT
	sigImmediate = syscall.SIGQUIT
)

// stopLocked signals the postmaster and waits for it. s.mu must be held.
func (s *Server) stopLocked(ctx context.Context, sig syscall.Signal) error {
	p := s.proc
	if p == nil {
		return nil
	}
	s.proc = nil
	if p.exited() {
		return fmt.Errorf("pgtest: postgres had exited on its own (%v)\n--- server log (%s) ---\n%s",
			p.err, s.logPath, s.LogTail(30))
	}
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
		if sig == sigFast && p.err != nil {
			return fmt.Errorf("pgtest: postgres shutdown: %v\n--- server log (%s) ---\n%s",
				p.err, s.logPath, s.LogTail(30))
		}
		return nil
	case <-ctx.Done():
		p.kill()
		return fmt.Errorf("pgtest: stop postgres: %w (killed it)", ctx.Err())
	}
}

// logSince returns what the server logged after offset.
func (s *Server) logSince(offset int64) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	if offset <= int64(len(b)) {
		b = b[offset:]
	}
	return string(bytes.TrimSpace(b))
}
