package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Options configures StartServer. The zero value is ready to use.
type Options struct {
	// Settings are extra postgresql.conf settings. They override the defaults
	// below, e.g. {"wal_level": "replica"} to test a misconfigured server.
	// Names must look like GUC names and values may not contain newlines.
	//
	// Defaults: wal_level=logical, fsync=off, full_page_writes=off,
	// synchronous_commit=on, max_replication_slots=20, max_wal_senders=20,
	// listen_addresses=127.0.0.1, logical_decoding_work_mem=64kB;
	// wal_sender_timeout and the rest keep PostgreSQL's defaults. A value of
	// ServerDefault drops a setting, default or not, so the server uses its
	// own (e.g. to measure with the 64 MB logical_decoding_work_mem). pgtest always sets unix_socket_directories to
	// the server's temp dir (it waits for startup through that socket) and
	// passes the port on the command line, so settings for either have no
	// effect.
	Settings map[string]string

	// BinDir holds initdb and postgres. Empty means FindBinDir().
	BinDir string

	// TLS, when set, makes TCP connections TLS-only (tls.go).
	TLS *TLS

	// PasswordAuth makes TCP connections of roles other than postgres
	// authenticate with scram-sha-256 (password.go). Ignored with TLS.
	PasswordAuth bool

	// CommandLine are settings passed on the postgres command line (-c
	// name=value), as pg_ctl -o, a container's command or Patroni pass
	// them: pg_settings.source is 'command line' for them.
	CommandLine map[string]string
}

// defaultSettings are tuned for fast, disposable servers. They give up crash
// safety of the OS (fsync=off): StopImmediate is still a faithful PostgreSQL
// crash, because the kernel keeps the written pages, but a power cut is not.
var defaultSettings = map[string]string{
	"wal_level":        "logical",
	"fsync":            "off",
	"full_page_writes": "off",
	// on, not off: a walsender only sends WAL that is flushed, so with
	// async commit every event waits up to wal_writer_delay (200ms) before
	// walbox even sees it, and crash tests would lose acknowledged commits.
	// With fsync=off the flush is cheap anyway.
	"synchronous_commit":    "on",
	"max_replication_slots": "20",
	"max_wal_senders":       "20",
	"listen_addresses":      "127.0.0.1",
	// The minimum, not PostgreSQL's 64 MB: every transaction of more than a
	// few hundred outbox rows then streams to walbox before its commit
	// (pgoutput protocol 2+), so the suites exercise streaming and the spool
	// instead of never reaching it. WorkMemServerDefault undoes it.
	"logical_decoding_work_mem": "64kB",
}

// ServerDefault, as a value in Options.Settings (or WithSetting), drops that
// setting from the configuration pgtest writes, so the server keeps its own
// default, e.g. WithSetting("logical_decoding_work_mem", ServerDefault).
const ServerDefault = "\x00server default"

// WorkMemServerDefault is the option for Start that gives the server
// PostgreSQL's own logical_decoding_work_mem (64 MB) instead of pgtest's
// 64kB, for tests and benchmarks that measure with the default settings.
var WorkMemServerDefault = WithSetting("logical_decoding_work_mem", ServerDefault)

// Server is a running (or stopped) throwaway PostgreSQL server. DSN, Port,
// MajorVersion, DataDir and LogPath are safe for concurrent use; Stop,
// StopImmediate, Restart and Close serialize with each other.
type Server struct {
	binDir  string
	root    string // temp dir: data dir, unix socket, owned by the server's OS user
	dataDir string
	logPath string
	port    int
	major   int
	cred    *credential
	tls     *TLS // Options.TLS
	pwAuth  bool // Options.PasswordAuth
	cmdLine []string

	mu     sync.Mutex
	proc   *proc // nil while stopped
	closed bool
}

// StartServer creates a new cluster in a fresh temporary directory (a copy
// of a cluster initdb made once per process, with a system identifier of its
// own: template.go), starts postgres on a free loopback port and waits until it
// accepts connections or ctx ends. On error nothing is left running and the
// temporary directory is removed; the error includes the tail of the server
// log. Errors wrap ErrUnavailable when the machine cannot run a server.
func StartServer(ctx context.Context, opts Options) (*Server, error) {
	settings, err := mergeSettings(opts.Settings)
	if err != nil {
		return nil, err
	}
	binDir := opts.BinDir
	if binDir == "" {
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	} else if err := checkBinDir(binDir); err != nil {
		return nil, fmt.Errorf("BinDir %s: %w", binDir, err)
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	if cred != nil && !traversable(binDir) {
		// Otherwise initdb fails with a bare "permission denied", e.g. for
		// binaries installed under /root.
		return nil, fmt.Errorf("pgtest: BinDir %s is not traversable by the postgres account that runs the server (we are root): install it elsewhere or chmod o+x its parents", binDir)
	}
	root, err := makeRoot(cred)
	if err != nil {
		return nil, err
	}
	s := &Server{
		binDir:  binDir,
		root:    root,
		dataDir: filepath.Join(root, "data"),
		cred:    cred,
		tls:     opts.TLS,
		pwAuth:  opts.PasswordAuth,
		cmdLine: commandLine(opts.CommandLine),
	}
	s.logPath = filepath.Join(s.dataDir, "postgres.log")
	if err := s.init(ctx, settings); err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	if err := s.startFreePort(ctx); err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	return s, nil
}

// init makes the data directory (a copy of the template cluster, see
// template.go) and writes the configuration files.
func (s *Server) init(ctx context.Context, settings map[string]string) error {
	if err := s.initFromTemplate(ctx); err != nil {
		return err
	}
	v, err := os.ReadFile(filepath.Join(s.dataDir, "PG_VERSION"))
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if s.major, err = strconv.Atoi(strings.TrimSpace(string(v))); err != nil {
		return fmt.Errorf("pgtest: PG_VERSION %q: %w", v, err)
	}

	hba := "# written by walbox internal/pgtest: trust everything local\n" +
		"local all         all              trust\n" +
		"local replication all              trust\n" +
		"host  all         all 127.0.0.1/32 trust\n" +
		"host  replication all 127.0.0.1/32 trust\n"
	if s.pwAuth {
		hba = passwordHBA
	}
	if s.tls != nil {
		if hba, err = s.setupTLS(settings); err != nil {
			return err
		}
	}

	// Later lines win in postgresql.conf, so appending overrides initdb's.
	var conf strings.Builder
	conf.WriteString("\n# --- added by walbox internal/pgtest ---\n")
	settings["unix_socket_directories"] = s.root
	names := make([]string, 0, len(settings))
	for name := range settings {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&conf, "%s = %s\n", name, quoteConf(settings[name]))
	}
	if err := appendFile(filepath.Join(s.dataDir, "postgresql.conf"), conf.String()); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}

	if err := os.WriteFile(filepath.Join(s.dataDir, "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	// The log is written by the postgres process through the descriptor we
	// hand it, but chown it anyway so a human running as postgres can read it.
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	_ = f.Close()
	return s.cred.chown(s.logPath)
}

// maxPortAttempts bounds retries when another process takes the port between
// our probe and postgres' bind.
const maxPortAttempts = 5

// startFreePort starts the server on a fresh free port, retrying on a clash.
func (s *Server) startFreePort(ctx context.Context) error {
	var err error
	for range maxPortAttempts {
		if s.port, err = freePort(); err != nil {
			return fmt.Errorf("pgtest: find a free port: %w", err)
		}
		s.mu.Lock()
		err = s.startLocked(ctx)
		s.mu.Unlock()
		if err == nil || !errors.Is(err, errPortInUse) {
			return err
		}
	}
	return err
}

// freePort asks the kernel for a free loopback port. Another process may take
// it before postgres binds; startFreePort retries then.
func freePort() (int, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// DSN returns a URL connecting as the superuser `postgres` over TCP to dbname
// (the cluster starts with `postgres`, `template1` and `template0`).
func (s *Server) DSN(dbname string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		Path:     "/" + dbname,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Port returns the TCP port on 127.0.0.1. It stays the same across Restart.
func (s *Server) Port() int { return s.port }

// MajorVersion returns the server's major version, e.g. 15.
func (s *Server) MajorVersion() int { return s.major }

// DataDir returns the cluster's data directory.
func (s *Server) DataDir() string { return s.dataDir }

// LogPath returns the server log file (postgres' stderr, appended across
// restarts).
func (s *Server) LogPath() string { return s.logPath }

// LogTail returns the last n lines of the server log, for error messages.
func (s *Server) LogTail(n int) string {
	b, err := os.ReadFile(s.logPath)
	if err != nil {
		return fmt.Sprintf("(no server log: %v)", err)
	}
	return tail(b, n)
}

// Stop shuts the server down cleanly (a "fast" shutdown: SIGINT, which
// rolls back open transactions and ends sessions) and waits for it to exit.
// If ctx ends first, the server is killed and ctx's error returned. Stopping
// a stopped server does nothing.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(ctx, sigFast)
}

// StopImmediate crashes the server on purpose: an "immediate" shutdown
// (SIGQUIT, what pg_ctl -m immediate sends) that writes no shutdown
// checkpoint, so the next start runs crash recovery from WAL. Use it to test
// that nothing is lost when the database dies.
func (s *Server) StopImmediate(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopLocked(ctx, sigImmediate)
}

// Restart stops the server cleanly if it is running and starts it again with
// the same data directory and port. After StopImmediate it performs crash
// recovery. It fails if another process took the port meanwhile.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("pgtest: Restart on a closed server")
	}
	if err := s.stopLocked(ctx, sigFast); err != nil {
		return err
	}
	return s.startLocked(ctx)
}

// closeTimeout bounds the clean shutdown in Close before the server is killed.
const closeTimeout = 30 * time.Second

// Close stops the server and removes its temporary directory. It is
// idempotent; calling any other method afterwards is a mistake.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	stopErr := s.stopLocked(ctx, sigFast)
	return errors.Join(stopErr, os.RemoveAll(s.root))
}

// mergeSettings applies opts over the defaults and validates the result.
func mergeSettings(extra map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(defaultSettings)+len(extra))
	for k, v := range defaultSettings {
		out[k] = v
	}
	for k, v := range extra {
		if !gucName.MatchString(k) {
			return nil, fmt.Errorf("pgtest: invalid setting name %q", k)
		}
		if v == ServerDefault {
			delete(out, strings.ToLower(k))
			continue
		}
		if strings.ContainsAny(v, "\n\r\x00") {
			return nil, fmt.Errorf("pgtest: setting %s: value contains a newline or NUL", k)
		}
		out[strings.ToLower(k)] = v
	}
	return out, nil
}

var gucName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.]*$`)

// quoteConf quotes a postgresql.conf value. Quoted values are accepted for
// every setting type; inside quotes, backslash is an escape character.
func quoteConf(v string) string {
	v = strings.ReplaceAll(v, `\`, `\\`)
	return "'" + strings.ReplaceAll(v, "'", "''") + "'"
}

func appendFile(path, text string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(text)
	return errors.Join(err, f.Close())
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// commandLine turns Options.CommandLine into postgres arguments, in name
// order.
func commandLine(settings map[string]string) []string {
	names := make([]string, 0, len(settings))
	for n := range settings {
		names = append(names, n)
	}
	sort.Strings(names)
	var args []string
	for _, n := range names {
		args = append(args, "-c", n+"="+settings[n])
	}
	return args
}
