package patronitest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/walbox/walbox/internal/childproc"
	"github.com/walbox/walbox/internal/faultproxy"
)

// Slot is a permanent slot of Patroni's dynamic configuration (`slots:`).
type Slot struct {
	Type     string `json:"type"`
	Database string `json:"database,omitempty"`
	Plugin   string `json:"plugin,omitempty"`
}

// Options describe a cluster.
type Options struct {
	Version Version
	// Members is the number of Patroni members (default 2).
	Members int
	// Slots are the permanent slots, by name.
	Slots map[string]Slot
	// Parameters are added to postgresql.parameters of the dynamic
	// configuration.
	Parameters map[string]any
	// TTL is Patroni's ttl in seconds (default and minimum 20: Patroni 4.1
	// with etcd3 refuses less); loop_wait is 2 and retry_timeout 5.
	TTL int
}

// Cluster is an etcd server and Patroni members on loopback, all killed
// by Close.
type Cluster struct {
	Scope   string
	Members []*Member

	root    string
	opts    Options
	cred    *syscall.Credential
	etcd    *process
	etcdURL string
	http    *http.Client
}

// Member is one Patroni member: its PostgreSQL listens on PGPort;
// replicas reach it (Patroni's postgresql.connect_address) through Proxy,
// which a test can Drop to cut its replicas off.
type Member struct {
	Name    string
	PGPort  int
	APIPort int
	Proxy   *faultproxy.Proxy
	DataDir string

	c       *Cluster
	dir     string
	cfgPath string
	logPath string

	mu      sync.Mutex
	patroni *process
}

type process struct {
	cmd  *exec.Cmd
	proc *childproc.Proc
}

func (p *process) exited() bool {
	select {
	case <-p.proc.Done():
		return true
	default:
		return false
	}
}

// kill SIGKILLs the process group and waits for the exit.
func (p *process) kill() {
	if p == nil || p.exited() {
		return
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	_ = p.cmd.Process.Kill()
	_ = p.proc.Wait()
}

// StartCluster starts etcd and opts.Members Patroni members, and waits
// until one is the leader and every other streams from it.
func StartCluster(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Members == 0 {
		opts.Members = 2
	}
	if opts.TTL == 0 {
		opts.TTL = 20
	}
	if err := hasTools(opts.Version.BinDir); err != nil {
		return nil, err
	}
	if _, err := os.Stat(PatroniBin()); err != nil {
		return nil, fmt.Errorf("%w: no Patroni in %s: run `go run ./internal/patronitest/cmd/patroniinstall`", ErrUnavailable, venvDir())
	}
	etcdBin, err := EtcdBin()
	if err != nil {
		return nil, err
	}
	c := &Cluster{Scope: "walbox", opts: opts, http: &http.Client{Timeout: 5 * time.Second}}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w: running as root, and there is no postgres account to run Patroni as: %v", ErrUnavailable, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	base := "/dev/shm"
	if fi, err := os.Stat(base); err != nil || !fi.IsDir() {
		base = os.TempDir()
	}
	if c.root, err = os.MkdirTemp(base, "walbox-patroni-"); err != nil {
		return nil, fmt.Errorf("patronitest: %w", err)
	}
	if err := os.Chmod(c.root, 0o755); err != nil {
		return nil, fmt.Errorf("patronitest: %w", err)
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.LogTails(30))
			c.Close()
		}
	}()
	if err := c.startEtcd(ctx, etcdBin); err != nil {
		return nil, err
	}
	for i := 0; i < opts.Members; i++ {
		m, err := c.newMember(i)
		if err != nil {
			return nil, err
		}
		c.Members = append(c.Members, m)
	}
	// The first member bootstraps alone, so that it is the leader.
	if err := c.Members[0].Start(); err != nil {
		return nil, err
	}
	if _, err := c.WaitLeader(ctx, nil); err != nil {
		return nil, err
	}
	for _, m := range c.Members[1:] {
		if err := m.Start(); err != nil {
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("patronitest: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func (c *Cluster) startEtcd(ctx context.Context, bin string) error {
	client, err := freePort()
	if err != nil {
		return err
	}
	peer, err := freePort()
	if err != nil {
		return err
	}
	dir := filepath.Join(c.root, "etcd")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("patronitest: %w", err)
	}
	c.etcdURL = fmt.Sprintf("http://127.0.0.1:%d", client)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peer)
	log, err := os.Create(filepath.Join(c.root, "etcd.log"))
	if err != nil {
		return fmt.Errorf("patronitest: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(bin, "--name", "etcd", "--data-dir", dir,
		"--listen-client-urls", c.etcdURL, "--advertise-client-urls", c.etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "etcd="+peerURL, "--initial-cluster-state", "new")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p, err := childproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("patronitest: start etcd: %w", err)
	}
	c.etcd = &process{cmd: cmd, proc: p}
	return poll(ctx, time.Minute, "etcd to answer", func() (bool, error) {
		if c.etcd.exited() {
			return false, errors.New("etcd exited")
		}
		resp, err := c.http.Get(c.etcdURL + "/health")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
}

func (c *Cluster) newMember(i int) (*Member, error) {
	m := &Member{Name: fmt.Sprintf("m%d", i), c: c, dir: filepath.Join(c.root, fmt.Sprintf("m%d", i))}
	var err error
	if m.PGPort, err = freePort(); err != nil {
		return nil, err
	}
	if m.APIPort, err = freePort(); err != nil {
		return nil, err
	}
	if m.Proxy, err = faultproxy.Start(net.JoinHostPort("127.0.0.1", strconv.Itoa(m.PGPort))); err != nil {
		return nil, fmt.Errorf("patronitest: %w", err)
	}
	if err := os.MkdirAll(m.dir, 0o700); err != nil {
		return nil, fmt.Errorf("patronitest: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(m.dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, fmt.Errorf("patronitest: %w", err)
		}
	}
	m.DataDir = filepath.Join(m.dir, "data")
	m.cfgPath = filepath.Join(m.dir, "patroni.yml")
	m.logPath = filepath.Join(m.dir, "patroni.log")
	params := map[string]any{
		"wal_level":               "logical",
		"hot_standby_feedback":    "on",
		"max_replication_slots":   10,
		"max_wal_senders":         10,
		"wal_keep_size":           "256MB",
		"wal_log_hints":           "on",
		"fsync":                   "off",
		"shared_buffers":          "32MB",
		"unix_socket_directories": m.dir,
		"logging_collector":       "off",
	}
	for k, v := range c.opts.Parameters {
		params[k] = v
	}
	slots := map[string]any{}
	for name, s := range c.opts.Slots {
		slots[name] = s
	}
	auth := map[string]any{"username": "postgres", "password": "walbox"}
	cfg := map[string]any{
		"scope": c.Scope,
		"name":  m.Name,
		"log":   map[string]any{"level": "INFO"},
		"restapi": map[string]any{
			"listen":          fmt.Sprintf("127.0.0.1:%d", m.APIPort),
			"connect_address": fmt.Sprintf("127.0.0.1:%d", m.APIPort),
		},
		"etcd3": map[string]any{"hosts": []string{strings.TrimPrefix(c.etcdURL, "http://")}},
		"bootstrap": map[string]any{
			"dcs": map[string]any{
				"ttl": c.opts.TTL, "loop_wait": 2, "retry_timeout": 5,
				// The lossy test cuts a replica off before the crash: it
				// must still be promoted.
				"maximum_lag_on_failover": 1 << 40,
				"postgresql": map[string]any{
					"use_pg_rewind": true,
					"use_slots":     true,
					"parameters":    params,
				},
				"slots": slots,
			},
			"initdb": []any{map[string]any{"encoding": "UTF8"}, map[string]any{"locale": "C"}},
		},
		"postgresql": map[string]any{
			"listen":          fmt.Sprintf("127.0.0.1:%d", m.PGPort),
			"connect_address": fmt.Sprintf("127.0.0.1:%d", m.Proxy.Port()),
			"data_dir":        m.DataDir,
			"bin_dir":         c.opts.Version.BinDir,
			"pgpass":          filepath.Join(m.dir, "pgpass"),
			"authentication":  map[string]any{"superuser": auth, "replication": auth, "rewind": auth},
			"pg_hba": []string{
				"local all all trust",
				"host all all 127.0.0.1/32 trust",
				"host replication all 127.0.0.1/32 trust",
			},
			"parameters": map[string]any{"unix_socket_directories": m.dir},
		},
	}
	b, err := json.MarshalIndent(cfg, "", "  ") // JSON is YAML
	if err != nil {
		return nil, fmt.Errorf("patronitest: %w", err)
	}
	if err := os.WriteFile(m.cfgPath, b, 0o644); err != nil {
		return nil, fmt.Errorf("patronitest: %w", err)
	}
	return m, nil
}

// Start starts the member's Patroni (again, after Kill: it rejoins).
func (m *Member) Start() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.patroni != nil && !m.patroni.exited() {
		return fmt.Errorf("patronitest: %s already runs", m.Name)
	}
	log, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("patronitest: %w", err)
	}
	defer log.Close()
	cmd := exec.Command(PatroniBin(), m.cfgPath)
	cmd.Dir = m.dir
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") && !strings.HasPrefix(kv, "LD_LIBRARY_PATH=") && !strings.HasPrefix(kv, "PATRONI_") {
			env = append(env, kv)
		}
	}
	env = append(env, "LC_ALL=C", "HOME="+m.dir)
	if lib := m.c.opts.Version.LibDir; lib != "" {
		env = append(env, "LD_LIBRARY_PATH="+lib)
	}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL, Credential: m.c.cred}
	p, err := childproc.Start(cmd)
	if err != nil {
		return fmt.Errorf("patronitest: start patroni %s: %w", m.Name, err)
	}
	m.patroni = &process{cmd: cmd, proc: p}
	return nil
}

// postmasterPID reads the postmaster's pid from its pid file; 0 if none.
func (m *Member) postmasterPID() int {
	b, err := os.ReadFile(filepath.Join(m.DataDir, "postmaster.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	return pid
}

// Kill SIGKILLs the member's Patroni and then its postmaster (a crash of
// the machine, as far as the others can tell), and waits until the
// postmaster is gone.
func (m *Member) Kill(ctx context.Context) error {
	m.mu.Lock()
	m.patroni.kill()
	m.mu.Unlock()
	pid := m.postmasterPID()
	if pid <= 0 {
		return nil
	}
	// Patroni starts the postmaster in a session of its own.
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return poll(ctx, time.Minute, "the postmaster of "+m.Name+" to die", func() (bool, error) {
		return syscall.Kill(pid, 0) != nil, nil
	})
}

// Addr is the member's PostgreSQL address, host:port.
func (m *Member) Addr() string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.PGPort)) }

// DSN is a connection string to the member's database db as postgres.
func (m *Member) DSN(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable&connect_timeout=2", m.PGPort, db)
}

// LogTail is the end of the member's Patroni log (which has PostgreSQL's
// log too: logging_collector is off).
func (m *Member) LogTail(lines int) string { return tail(m.logPath, lines) }

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// LogTails is the end of every log of the cluster.
func (c *Cluster) LogTails(lines int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "--- etcd:\n%s\n", tail(filepath.Join(c.root, "etcd.log"), lines))
	for _, m := range c.Members {
		fmt.Fprintf(&b, "--- %s (patroni %s):\n%s\n", m.Name, PatroniVersion, m.LogTail(lines))
	}
	return b.String()
}

// MultiHostDSN is a libpq multi-host connection string to database db over
// every member, target_session_attrs=read-write: it reaches whichever is
// the primary.
func (c *Cluster) MultiHostDSN(db string) string {
	hosts := make([]string, len(c.Members))
	ports := make([]string, len(c.Members))
	for i, m := range c.Members {
		hosts[i], ports[i] = "127.0.0.1", strconv.Itoa(m.PGPort)
	}
	return fmt.Sprintf("host=%s port=%s dbname=%s user=postgres sslmode=disable connect_timeout=2 target_session_attrs=read-write",
		strings.Join(hosts, ","), strings.Join(ports, ","), db)
}

// MemberState is one member as Patroni's /cluster reports it.
type MemberState struct {
	Name     string `json:"name"`
	Role     string `json:"role"`  // leader, replica, sync_standby
	State    string `json:"state"` // running, streaming, ...
	Timeline int    `json:"timeline"`
}

// State asks the members' REST APIs for the cluster, the first that
// answers.
func (c *Cluster) State() ([]MemberState, error) {
	var last error
	for _, m := range c.Members {
		resp, err := c.http.Get(fmt.Sprintf("http://127.0.0.1:%d/cluster", m.APIPort))
		if err != nil {
			last = err
			continue
		}
		var body struct {
			Members []MemberState `json:"members"`
		}
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if err != nil {
			last = err
			continue
		}
		return body.Members, nil
	}
	return nil, fmt.Errorf("patronitest: no member's REST API answers: %w", last)
}

func (c *Cluster) member(name string) *Member {
	for _, m := range c.Members {
		if m.Name == name {
			return m
		}
	}
	return nil
}

// WaitLeader waits until a member other than not (when given) is the
// running leader, and returns it.
func (c *Cluster) WaitLeader(ctx context.Context, not *Member) (*Member, error) {
	var leader *Member
	err := poll(ctx, 3*time.Minute, "a leader", func() (bool, error) {
		states, err := c.State()
		if err != nil {
			return false, nil
		}
		for _, s := range states {
			if s.Role == "leader" && s.State == "running" && (not == nil || s.Name != not.Name) {
				leader = c.member(s.Name)
				return leader != nil, nil
			}
		}
		return false, nil
	})
	return leader, err
}

// WaitHealthy waits until one member leads and every member whose
// Patroni runs streams from it.
func (c *Cluster) WaitHealthy(ctx context.Context) error {
	return poll(ctx, 3*time.Minute, "every member to stream from the leader", func() (bool, error) {
		states, err := c.State()
		if err != nil {
			return false, nil
		}
		want := 0
		for _, m := range c.Members {
			m.mu.Lock()
			if m.patroni != nil && !m.patroni.exited() {
				want++
			}
			m.mu.Unlock()
		}
		ok := 0
		for _, s := range states {
			if (s.Role == "leader" && s.State == "running") || ((s.Role == "replica" || s.Role == "sync_standby") && s.State == "streaming") {
				ok++
			}
		}
		return ok == want, nil
	})
}

// Switchover asks Patroni to hand the leadership from leader to candidate
// and waits until candidate leads.
func (c *Cluster) Switchover(ctx context.Context, leader, candidate *Member) error {
	body, _ := json.Marshal(map[string]string{"leader": leader.Name, "candidate": candidate.Name})
	resp, err := c.http.Post(fmt.Sprintf("http://127.0.0.1:%d/switchover", leader.APIPort), "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("patronitest: switchover: %w", err)
	}
	msg, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("patronitest: switchover %s -> %s: %s: %s", leader.Name, candidate.Name, resp.Status, msg)
	}
	got, err := c.WaitLeader(ctx, leader)
	if err != nil {
		return err
	}
	if got != candidate {
		return fmt.Errorf("patronitest: switchover made %s the leader, not %s", got.Name, candidate.Name)
	}
	return nil
}

// Close kills every process and removes the cluster's files.
func (c *Cluster) Close() {
	for _, m := range c.Members {
		_ = m.Kill(context.Background())
		m.Proxy.Close()
	}
	c.etcd.kill()
	if c.root != "" {
		_ = os.RemoveAll(c.root)
	}
}

// poll runs cond until it holds, fails, or timeout or ctx ends.
func poll(ctx context.Context, timeout time.Duration, what string, cond func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("patronitest: waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("patronitest: timed out after %s waiting for %s", timeout, what)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("patronitest: waiting for %s: %w", what, ctx.Err())
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
}
