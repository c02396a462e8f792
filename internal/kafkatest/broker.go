package kafkatest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Broker is a running (or stopped) throwaway Kafka broker, or a wrapper
// around an external one (see Start). Addr, Addrs, CanFault, Version,
// LogPath and LogTail are safe for concurrent use; Kill, Stop, Restart and
// Close serialize with each other.
type Broker struct {
	external []string // KAFKA_BROKERS; nil for a broker we run

	opts           Options
	java           string
	cp             classpath
	archive        string // CDS archive path; "" when disabled
	dir            string // temp dir holding everything below
	dataDir        string // log.dirs, KRaft metadata included
	propsPath      string
	log4jPath      string
	logPath        string // the broker's log4j log, appended across restarts
	jvmLogPath     string // the JVM's stdout and stderr
	brokerPort     int
	controllerPort int
	saslPort       int            // the SASL_SSL listener's, with Options.SASLSSL
	member         *clusterMember // nil unless a node of a Cluster (cluster.go)

	mu       sync.Mutex
	proc     *proc  // nil while stopped or killed
	dumpPath string // where proc writes a CDS archive at exit; "" if it does not
	closed   bool
}

// StartBroker formats a fresh KRaft storage directory in a new temporary
// directory, starts a single-node broker+controller JVM on two free loopback
// ports and waits until the broker answers a Metadata request or ctx ends
// (two minutes if ctx has no deadline). On error nothing is left running,
// the temporary directory is removed, and the error (a *StartError once the
// JVM has run) includes the tail of the broker log. Errors wrap
// ErrUnavailable when the machine cannot run a broker.
func StartBroker(ctx context.Context, opts Options) (*Broker, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if !supported {
		return nil, fmt.Errorf("%w: brokers run only on Linux, where a JVM cannot outlive its test", ErrUnavailable)
	}
	java, err := findJava(opts)
	if err != nil {
		return nil, err
	}
	cache, err := cacheDir(opts)
	if err != nil {
		return nil, err
	}
	cp, err := resolveClasspath(ctx, opts, cache)
	if err != nil {
		return nil, err
	}
	root, err := makeRoot()
	if err != nil {
		return nil, err
	}
	b := &Broker{
		opts:       opts,
		java:       java,
		cp:         cp,
		dir:        root,
		dataDir:    filepath.Join(root, "data"),
		propsPath:  filepath.Join(root, "server.properties"),
		log4jPath:  filepath.Join(root, "log4j2.properties"),
		logPath:    filepath.Join(root, "broker.log"),
		jvmLogPath: filepath.Join(root, "jvm.log"),
	}
	if !opts.DisableCDS {
		b.archive = cdsArchivePath(cache, java, cp)
		sweepStaleDumps(cache)
	}
	if err := os.WriteFile(b.log4jPath, []byte(log4jConfig(b.logPath)), 0o644); err != nil {
		_ = os.RemoveAll(root)
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	if err := b.startFresh(ctx); err != nil {
		_ = os.RemoveAll(root)
		return nil, err
	}
	return b, nil
}

// TmpDirEnv names the environment variable that chooses where brokers keep
// their data, overriding the search in makeRoot.
const TmpDirEnv = "WALBOX_KAFKATEST_TMPDIR"

// shmDir is a tmpfs on most Linux systems. Broker data there survives Kill
// (the kernel keeps the pages), which is all the fault tests need.
const shmDir = "/dev/shm"

// minShmFree is the free space /dev/shm needs before kafkatest uses it:
// Docker gives containers a 64 MiB /dev/shm, too small for a broker's
// preallocated index files.
const minShmFree = 1 << 30

// makeRoot creates the broker's temporary directory under
// $WALBOX_KAFKATEST_TMPDIR if set, else /dev/shm if it is large enough, else
// os.TempDir().
func makeRoot() (string, error) {
	base := os.Getenv(TmpDirEnv)
	if base == "" && freeSpace(shmDir) >= minShmFree {
		base = shmDir
	}
	root, err := os.MkdirTemp(base, "walbox-kafka-")
	if err != nil {
		return "", fmt.Errorf("kafkatest: %w", err)
	}
	return root, nil
}

// maxPortAttempts bounds retries when another process takes a port between
// our probe and the JVM's bind.
const maxPortAttempts = 3

// startFresh picks ports, gives the broker a freshly formatted storage and
// starts it, retrying on a port clash.
func (b *Broker) startFresh(ctx context.Context) error {
	var err error
	for range maxPortAttempts {
		if b.brokerPort, b.controllerPort, err = freePorts(); err != nil {
			return fmt.Errorf("kafkatest: find free ports: %w", err)
		}
		if b.opts.SASLSSL != nil {
			if b.saslPort, err = freePort(); err != nil {
				return fmt.Errorf("kafkatest: find free ports: %w", err)
			}
		}
		if err := os.RemoveAll(b.dataDir); err != nil {
			return fmt.Errorf("kafkatest: %w", err)
		}
		if err := b.format(ctx); err != nil {
			return err
		}
		b.mu.Lock()
		err = b.startLocked(ctx, "start")
		b.mu.Unlock()
		if err == nil || !errors.Is(err, errPortInUse) {
			return err
		}
	}
	return err
}

// freePorts asks the kernel for two distinct free loopback ports. Another
// process may take one before the JVM binds; startFresh retries then.
func freePorts() (broker, controller int, err error) {
	l1, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer l1.Close()
	l2, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, 0, err
	}
	defer l2.Close()
	return l1.Addr().(*net.TCPAddr).Port, l2.Addr().(*net.TCPAddr).Port, nil
}

// format writes server.properties and gives the broker its storage: a copy
// of this process's formatted template for these properties (format.go) with
// a new cluster and directory id, or, with SASL_SSL (whose format adds the
// SCRAM user), the equivalent of `kafka-storage.sh format -t <id> -c
// server.properties`.
func (b *Broker) format(ctx context.Context) error {
	props := b.opts.serverProperties(b.brokerPort, b.controllerPort, b.dataDir)
	if b.member != nil {
		b.member.apply(props, b.opts)
	}
	if b.opts.SASLSSL != nil {
		if err := b.opts.SASLSSL.addProperties(props, b.saslPort, b.dir); err != nil {
			return err
		}
	}
	if err := os.WriteFile(b.propsPath, []byte(renderProperties(props)), 0o644); err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	if b.opts.SASLSSL == nil {
		return b.copyFormatted(ctx, props)
	}
	return b.runFormat(ctx, b.propsPath, b.dir, b.opts.SASLSSL.formatArgs()...)
}

// runFormat runs Kafka's StorageTool format on the properties at propsPath,
// in dir, with a new cluster id.
func (b *Broker) runFormat(ctx context.Context, propsPath, dir string, extra ...string) error {
	clusterID, err := newClusterID()
	if err != nil {
		return fmt.Errorf("kafkatest: cluster id: %w", err)
	}
	cds, _ := cdsArgs(b.archive, false) // only a broker run dumps the archive
	args := append(append(append([]string{}, jvmDefaults...), cds...), b.opts.JVMArgs...)
	args = append(args,
		"-Dlog4j2.configurationFile="+b.log4jPath,
		"-cp", b.cp.String(),
		"kafka.tools.StorageTool", "format",
		"-t", clusterID,
		"-c", propsPath,
	)
	args = append(args, extra...)
	cmd := exec.CommandContext(ctx, b.java, args...)
	cmd.Dir = dir
	setGroupKill(cmd)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err = runTool(cmd)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return &StartError{Op: "format", Addr: b.Addr(), Err: err,
			LogTail: "--- kafka.tools.StorageTool output ---\n" + tail(out.Bytes(), 30)}
	}
	return nil
}

// newClusterID returns a random Kafka Uuid in its base64 form. Like Kafka's
// Uuid.randomUuid it avoids a leading '-', which a command line would take
// for a flag.
func newClusterID() (string, error) {
	for {
		var u [16]byte
		if _, err := rand.Read(u[:]); err != nil {
			return "", err
		}
		if s := base64.RawURLEncoding.EncodeToString(u[:]); s[0] != '-' {
			return s, nil
		}
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// defaultStartTimeout bounds a start when ctx has no deadline: a cold JVM on
// a busy 2-core machine needs well under a minute.
const defaultStartTimeout = 2 * time.Minute

// startLocked starts the broker JVM and waits until it serves Metadata.
// b.mu must be held.
func (b *Broker) startLocked(ctx context.Context, op string) error {
	if b.closed {
		return ErrClosed
	}
	if b.proc != nil {
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	out, err := os.OpenFile(b.jvmLogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("kafkatest: %w", err)
	}
	logStart, jvmLogStart := fileSize(b.logPath), fileSize(b.jvmLogPath)

	cds, dumpPath := cdsArgs(b.archive, true)
	args := append(append(append([]string{}, jvmDefaults...), cds...), b.opts.JVMArgs...)
	args = append(args,
		"-Dlog4j2.configurationFile="+b.log4jPath,
		"-Dkafka.logs.dir="+b.dir,
		"-cp", b.cp.String(),
		"kafka.Kafka", b.propsPath,
	)
	p, err := spawn(b.java, args, b.dir, out)
	_ = out.Close() // the JVM holds its own descriptor
	if err != nil {
		return &StartError{Op: op, Addr: b.Addr(), Err: fmt.Errorf("run %s: %w", b.java, err)}
	}
	if err := b.waitReady(ctx, p); err != nil {
		p.kill()
		commitArchive(dumpPath, b.archive, false)
		logs := b.logsSince(logStart, jvmLogStart)
		if strings.Contains(logs, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return &StartError{Op: op, Addr: b.Addr(), Err: err, LogTail: logs}
	}
	b.proc = p
	b.dumpPath = dumpPath
	return nil
}

// readyAttemptTimeout bounds one Metadata request while waiting for the
// broker, so a hung connection cannot eat the whole start deadline.
const readyAttemptTimeout = 3 * time.Second

// waitReady polls the broker with Metadata requests until one lists a
// broker, the JVM exits, or ctx ends. A KRaft broker only processes client
// requests once it has registered with the controller and caught up with
// the metadata log, so an answer means it is ready for produce and fetch.
func (b *Broker) waitReady(ctx context.Context, p *proc) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addr()),
		kgo.DialTimeout(time.Second),
		// kgo's default backoff grows to 2.5 s between retries of a refused
		// dial, which would be added to every start; poll steadily instead.
		kgo.RetryBackoffFn(func(int) time.Duration { return 50 * time.Millisecond }),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	var lastErr error
	for {
		if p.exited() {
			return fmt.Errorf("the JVM exited during startup: %v", p.err)
		}
		actx, cancel := context.WithTimeout(ctx, readyAttemptTimeout)
		md, err := adm.BrokerMetadata(actx)
		cancel()
		if err == nil && len(md.Brokers) > 0 {
			return nil
		}
		if err == nil {
			err = errors.New("metadata lists no brokers")
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w (last Metadata attempt: %v)", ctx.Err(), lastErr)
		case <-p.done:
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// logsSince returns the end of what the broker log and the JVM output
// received since the given offsets, i.e. during the current start.
func (b *Broker) logsSince(logStart, jvmLogStart int64) string {
	return LogsSince("broker log", b.logPath, logStart, b.jvmLogPath, jvmLogStart)
}

// LogsSince returns the last 40 lines that the log file logPath and the
// last 20 that the JVM's own output jvmLogPath received since the given
// offsets (FileSize before a start), headed by label and the paths; the
// JVM's part is left out when it is empty.
func LogsSince(label, logPath string, logStart int64, jvmLogPath string, jvmLogStart int64) string {
	var s strings.Builder
	fmt.Fprintf(&s, "--- %s (%s) ---\n%s\n", label, logPath, tail(readFrom(logPath, logStart), 40))
	if out := tail(readFrom(jvmLogPath, jvmLogStart), 20); strings.TrimSpace(out) != "" {
		fmt.Fprintf(&s, "--- JVM output (%s) ---\n%s\n", jvmLogPath, out)
	}
	return s.String()
}

func readFrom(path string, off int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		return nil
	}
	b, _ := io.ReadAll(f)
	return b
}

// Addr returns the broker's host:port (for an external broker, the first of
// KAFKA_BROKERS). It stays the same across Kill and Restart.
func (b *Broker) Addr() string {
	if b.external != nil {
		return b.external[0]
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(b.brokerPort))
}

// Addrs returns the seed brokers, for kgo.SeedBrokers.
func (b *Broker) Addrs() []string {
	if b.external != nil {
		return append([]string(nil), b.external...)
	}
	return []string{b.Addr()}
}

// CanFault reports whether Kill, Stop and Restart work: false for an
// external broker (KAFKA_BROKERS).
func (b *Broker) CanFault() bool { return b.external == nil }

// Version returns the Kafka version named by the pom, or "" for an external
// broker.
func (b *Broker) Version() string { return b.cp.version }

// LogPath returns the broker's log file (appended across restarts), or ""
// for an external broker.
func (b *Broker) LogPath() string { return b.logPath }

// LogTail returns the last n lines of the broker log, for error messages.
func (b *Broker) LogTail(n int) string {
	if b.external != nil {
		return "(external broker: no log)"
	}
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return fmt.Sprintf("(no broker log: %v)", err)
	}
	return tail(data, n)
}

// Kill sends SIGKILL to the broker JVM (its whole process group) and waits
// until it is gone: a crash without controlled shutdown or log flush, so the
// next Restart runs log recovery. Data written before the kill survives,
// because the kernel keeps the pages the JVM wrote. Kill of a stopped broker
// returns ErrNotRunning.
func (b *Broker) Kill() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkFault(); err != nil {
		return err
	}
	if b.proc == nil {
		return ErrNotRunning
	}
	b.proc.kill()
	commitArchive(b.dumpPath, b.archive, false)
	b.proc, b.dumpPath = nil, ""
	return nil
}

// Pause stops the broker JVM with SIGSTOP: its connections stay open but
// nothing answers, like a stalled host or a network partition that drops
// packets. Resume continues it.
func (b *Broker) Pause() error { return b.signal(syscall.SIGSTOP) }

// Resume continues a paused broker with SIGCONT.
func (b *Broker) Resume() error { return b.signal(syscall.SIGCONT) }

func (b *Broker) signal(sig syscall.Signal) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkFault(); err != nil {
		return err
	}
	if b.proc == nil {
		return ErrNotRunning
	}
	if err := syscall.Kill(-b.proc.pid(), sig); err != nil {
		return fmt.Errorf("kafkatest: %v to broker pid %d: %w", sig, b.proc.pid(), err)
	}
	return nil
}

func (b *Broker) checkFault() error {
	if b.external != nil {
		return ErrExternalBroker
	}
	if b.closed {
		return ErrClosed
	}
	return nil
}

// Stop shuts the broker down gracefully (SIGTERM: Kafka's controlled
// shutdown) and waits for the JVM to exit. If ctx ends first the JVM is
// killed and ctx's error returned. Stopping a stopped broker does nothing;
// if the JVM had died on its own, Stop says so.
func (b *Broker) Stop(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkFault(); err != nil {
		return err
	}
	return b.stopLocked(ctx)
}

func (b *Broker) stopLocked(ctx context.Context) error {
	p := b.proc
	if p == nil {
		return nil
	}
	dumpPath := b.dumpPath
	b.proc, b.dumpPath = nil, ""
	if p.exited() {
		commitArchive(dumpPath, b.archive, false)
		return fmt.Errorf("kafkatest: broker %s had exited on its own (%v)\n--- broker log (%s) ---\n%s",
			b.Addr(), p.err, b.logPath, b.LogTail(30))
	}
	p.terminate()
	select {
	case <-p.done:
		commitArchive(dumpPath, b.archive, true)
		return nil
	case <-ctx.Done():
		p.kill()
		commitArchive(dumpPath, b.archive, false)
		return fmt.Errorf("kafkatest: broker %s did not stop in time and was killed: %w", b.Addr(), ctx.Err())
	}
}

// Restart stops the broker gracefully if it is running and starts it again
// on the same ports and data directory, waiting until it is ready. After
// Kill it runs Kafka's log recovery. It fails if another process took one of
// the ports meanwhile.
func (b *Broker) Restart(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.checkFault(); err != nil {
		return err
	}
	if b.proc != nil && b.proc.exited() {
		// Died on its own: a restart is what the caller wants anyway.
		commitArchive(b.dumpPath, b.archive, false)
		b.proc, b.dumpPath = nil, ""
	}
	if err := b.stopLocked(ctx); err != nil {
		return err
	}
	return b.startLocked(ctx, "restart")
}

// closeTimeout bounds the graceful shutdown in Close before the JVM is
// killed. A JVM writing the CDS archive takes about 5 s to exit.
const closeTimeout = time.Minute

// Close stops the broker (gracefully, killing it after a minute) and
// removes its temporary directory. It is idempotent, does nothing for an
// external broker, and calling any other method but Addr afterwards is a
// mistake.
func (b *Broker) Close() error {
	if b.external != nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	stopErr := b.stopLocked(ctx)
	return errors.Join(stopErr, os.RemoveAll(b.dir))
}
