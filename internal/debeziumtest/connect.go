package debeziumtest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/kafkatest"
)

// PomEnv names the environment variable that points at the Maven project
// naming Connect's and Debezium's jars, overriding the search for
// e2e/debezium/pom.xml.
const PomEnv = "WALBOX_DEBEZIUM_POM"

// pomRelPath is where the pom lives relative to the repository root.
var pomRelPath = filepath.Join("e2e", "debezium", "pom.xml")

// Connect is a Kafka Connect standalone worker running Debezium's Postgres
// connector. Its accessors are safe for concurrent use; Stop, Kill,
// Restart and Close serialize with each other.
type Connect struct {
	opts      Options
	name      string
	java      string
	jars      []string
	jvmArgs   []string
	dir       string
	ownDir    bool // dir was created by Start and is removed by Close
	worker    map[string]string
	connector map[string]string
	restAddr  string

	workerPath, connectorPath, log4jPath, logPath, jvmLogPath, offsetsPath string

	mu     sync.Mutex
	jvm    *kafkatest.JVM // nil while stopped
	closed bool
}

// defaultStartTimeout bounds a Start whose ctx has no deadline: a cold
// classpath resolution plus a Connect start on a busy 2-core machine.
const defaultStartTimeout = 4 * time.Minute

// Start resolves the classpath, writes the worker and connector
// properties, starts Connect standalone and waits until the connector's
// task is RUNNING and its slot streaming (see WaitRunning) or ctx ends
// (four minutes if ctx has no deadline). On error nothing is left running,
// a directory Start created is removed, and the error carries the end of
// Connect's log. Errors wrap ErrUnavailable when the machine cannot run
// Connect.
func Start(ctx context.Context, opts Options) (*Connect, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultStartTimeout)
		defer cancel()
	}
	kopts := kafkatest.Options{Java: opts.Java, Maven: opts.Maven, CacheDir: opts.CacheDir}
	java, err := kafkatest.FindJava(kopts)
	if err != nil {
		return nil, err
	}
	if !kafkatest.Supported() {
		return nil, fmt.Errorf("%w: Connect runs only on Linux, where its JVM cannot outlive the test", ErrUnavailable)
	}
	pom, err := findPom(opts)
	if err != nil {
		return nil, err
	}
	jars, _, err := kafkatest.ResolveClasspath(ctx, kopts, pom, "debezium")
	if err != nil {
		return nil, err
	}
	c := &Connect{opts: opts, name: opts.name(), java: java, jars: jars, dir: opts.Dir}
	c.jvmArgs = opts.JVMArgs
	if c.jvmArgs == nil {
		c.jvmArgs = TestJVMArgs()
	}
	if c.dir == "" {
		if c.dir, err = os.MkdirTemp("", "walbox-debezium-"); err != nil {
			return nil, fmt.Errorf("debeziumtest: %w", err)
		}
		c.ownDir = true
	} else if err := os.MkdirAll(c.dir, 0o755); err != nil {
		return nil, fmt.Errorf("debeziumtest: Options.Dir: %w", err)
	}
	c.workerPath = filepath.Join(c.dir, "worker.properties")
	c.connectorPath = filepath.Join(c.dir, "connector.properties")
	c.log4jPath = filepath.Join(c.dir, "log4j2.properties")
	c.logPath = filepath.Join(c.dir, "connect.log")
	c.jvmLogPath = filepath.Join(c.dir, "jvm.log")
	c.offsetsPath = filepath.Join(c.dir, "offsets.dat")
	c.connector = opts.ConnectorProperties()

	var startErr error
	for range maxPortAttempts {
		if startErr = c.configure(); startErr != nil {
			break
		}
		c.mu.Lock()
		startErr = c.startLocked(ctx)
		c.mu.Unlock()
		if !errors.Is(startErr, errPortInUse) {
			break
		}
	}
	if startErr != nil {
		if c.ownDir {
			_ = os.RemoveAll(c.dir)
		}
		return nil, startErr
	}
	return c, nil
}

// maxPortAttempts bounds retries when another process takes the REST port
// between our probe and the JVM's bind.
const maxPortAttempts = 3

// configure picks a REST port and writes the properties files.
func (c *Connect) configure() error {
	port, err := kafkatest.FreePort()
	if err != nil {
		return fmt.Errorf("debeziumtest: find a free port: %w", err)
	}
	c.restAddr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c.worker = merge(defaultWorkerProperties(c.opts.Bootstrap, c.restAddr, c.offsetsPath), c.opts.Worker)
	for path, content := range map[string]string{
		c.workerPath:    kafkatest.RenderProperties(c.worker),
		c.connectorPath: kafkatest.RenderProperties(c.connector),
		c.log4jPath:     log4jConfig(c.logPath),
	} {
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			return fmt.Errorf("debeziumtest: %w", err)
		}
	}
	return nil
}

// findPom returns opts.Pom, $WALBOX_DEBEZIUM_POM, or e2e/debezium/pom.xml
// in the working directory or its nearest parent that has one.
func findPom(opts Options) (string, error) {
	return kafkatest.FindProjectFile(opts.Pom, PomEnv, pomRelPath)
}

// startLocked starts the JVM and waits until the task runs. c.mu must be
// held.
func (c *Connect) startLocked(ctx context.Context) error {
	if c.closed {
		return ErrClosed
	}
	if c.jvm != nil {
		return nil
	}
	out, err := os.OpenFile(c.jvmLogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("debeziumtest: %w", err)
	}
	logStart, jvmLogStart := kafkatest.FileSize(c.logPath), kafkatest.FileSize(c.jvmLogPath)
	args := append(append([]string{}, c.jvmArgs...),
		"-Dlog4j2.configurationFile="+c.log4jPath,
		"-cp", strings.Join(c.jars, string(os.PathListSeparator)),
		"org.apache.kafka.connect.cli.ConnectStandalone",
		c.workerPath, c.connectorPath,
	)
	jvm, err := kafkatest.StartJVM(c.java, args, c.dir, out)
	_ = out.Close() // the JVM holds its own descriptor
	if err != nil {
		return err
	}
	c.jvm = jvm
	if err := c.waitRunning(ctx, jvm); err != nil {
		jvm.Kill()
		c.jvm = nil
		logs := kafkatest.LogsSince("Connect log", c.logPath, logStart, c.jvmLogPath, jvmLogStart)
		if strings.Contains(logs, "Address already in use") {
			err = fmt.Errorf("%w: %w", errPortInUse, err)
		}
		return fmt.Errorf("debeziumtest: start Connect (REST %s): %w\n%s", c.restAddr, err, logs)
	}
	return nil
}

// WaitRunning polls Connect's REST API until the connector and its task
// report RUNNING and then Postgres until a walsender streams the
// connector's slot (from then on every committed row is streamed), or
// until the task FAILED (the error carries Connect's trace), the JVM
// exited, or ctx ends. Start and Restart call it.
func (c *Connect) WaitRunning(ctx context.Context) error {
	c.mu.Lock()
	jvm := c.jvm
	c.mu.Unlock()
	if jvm == nil {
		return fmt.Errorf("debeziumtest: Connect is not running")
	}
	return c.waitRunning(ctx, jvm)
}

// connectorStatus is the body of GET /connectors/<name>/status.
type connectorStatus struct {
	Connector struct {
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"connector"`
	Tasks []struct {
		ID    int    `json:"id"`
		State string `json:"state"`
		Trace string `json:"trace"`
	} `json:"tasks"`
}

// pollInterval is the pause between two status requests.
const pollInterval = 100 * time.Millisecond

func (c *Connect) waitRunning(ctx context.Context, jvm *kafkatest.JVM) error {
	url := "http://" + c.restAddr + "/connectors/" + c.name + "/status"
	client := &http.Client{Timeout: 3 * time.Second}
	last := "no answer yet"
	for {
		st, err := c.status(ctx, client, url)
		switch {
		case err != nil:
			last = err.Error()
		case st.failure(c.name) != nil:
			return st.failure(c.name)
		case st.Connector.State == "RUNNING" && len(st.Tasks) > 0 && st.Tasks[0].State == "RUNNING":
			// Connect reports RUNNING once the task's start returned,
			// which created the publication and the slot; Debezium then
			// picks its starting position and starts streaming in a
			// thread of its own. Wait for the slot's walsender to stream:
			// a row committed before that may lie before the position
			// Debezium starts from, and every test relies on a row
			// committed after Start being streamed.
			ok, err := c.slotStreaming(ctx)
			if err == nil && ok {
				return nil
			}
			last = fmt.Sprintf("task RUNNING, slot %q not streaming yet (%v)", c.connector["slot.name"], err)
		default:
			last = fmt.Sprintf("connector %s, %d tasks", st.Connector.State, len(st.Tasks))
			if len(st.Tasks) > 0 {
				last += ", task 0 " + st.Tasks[0].State
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("connector %s not RUNNING: %w (last status: %s)", c.name, ctx.Err(), last)
		case <-jvm.Done():
			return fmt.Errorf("the Connect JVM exited during startup: %v", jvm.Err())
		case <-time.After(pollInterval):
		}
	}
}

// Check returns nil while the Connect JVM runs and neither the connector
// nor its task is FAILED, and otherwise an error naming what failed, with
// Connect's trace or the end of its log. A failed task stays FAILED in
// standalone mode (nothing restarts it), so a caller waiting for records
// should Check now and then rather than wait for its deadline.
func (c *Connect) Check(ctx context.Context) error {
	c.mu.Lock()
	jvm := c.jvm
	c.mu.Unlock()
	if jvm == nil {
		return fmt.Errorf("debeziumtest: Connect is not running")
	}
	select {
	case <-jvm.Done():
		return fmt.Errorf("debeziumtest: the Connect JVM exited (%v)\n--- Connect log (%s) ---\n%s", jvm.Err(), c.logPath, c.LogTail(30))
	default:
	}
	url := "http://" + c.restAddr + "/connectors/" + c.name + "/status"
	st, err := c.status(ctx, &http.Client{Timeout: 3 * time.Second}, url)
	if err != nil {
		return fmt.Errorf("debeziumtest: %w", err)
	}
	if err := st.failure(c.name); err != nil {
		return fmt.Errorf("debeziumtest: %w", err)
	}
	return nil
}

// failure returns an error with Connect's trace if the connector or its
// first task FAILED, else nil.
func (st connectorStatus) failure(name string) error {
	switch {
	case st.Connector.State == "FAILED":
		return fmt.Errorf("connector %s FAILED: %s", name, firstLines(st.Connector.Trace, 15))
	case len(st.Tasks) > 0 && st.Tasks[0].State == "FAILED":
		return fmt.Errorf("task %s-%d FAILED: %s", name, st.Tasks[0].ID, firstLines(st.Tasks[0].Trace, 15))
	}
	return nil
}

func (c *Connect) status(ctx context.Context, client *http.Client, url string) (connectorStatus, error) {
	var st connectorStatus
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	if err := json.Unmarshal(body, &st); err != nil {
		return st, fmt.Errorf("GET %s: %w", url, err)
	}
	return st, nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	if len(lines) > n {
		lines = lines[:n]
	}
	return strings.Join(lines, "\n")
}

// Stop shuts Connect down gracefully (SIGTERM: the worker stops the task,
// which commits and flushes its source offsets to OffsetsFile) and waits
// for the JVM to exit. If ctx ends first the JVM is killed and ctx's error
// returned. Stopping a stopped Connect does nothing; if the JVM had died
// on its own, Stop says so.
func (c *Connect) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stopLocked(ctx)
}

func (c *Connect) stopLocked(ctx context.Context) error {
	jvm := c.jvm
	if jvm == nil {
		return nil
	}
	c.jvm = nil
	select {
	case <-jvm.Done():
		return fmt.Errorf("debeziumtest: Connect had exited on its own (%v)\n--- Connect log (%s) ---\n%s", jvm.Err(), c.logPath, c.LogTail(30))
	default:
	}
	jvm.Terminate()
	select {
	case <-jvm.Done():
		return nil
	case <-ctx.Done():
		jvm.Kill()
		return fmt.Errorf("%w: %w\n--- Connect log (%s) ---\n%s", ErrStopTimeout, ctx.Err(), c.logPath, c.LogTail(30))
	}
}

// Kill sends SIGKILL to the Connect JVM and waits until it is gone: no
// offset flush, so a restarted connector (or walbox taking over) resumes
// from the last flushed offset. Killing a stopped Connect does nothing.
func (c *Connect) Kill() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jvm != nil {
		c.jvm.Kill()
		c.jvm = nil
	}
}

// Restart stops Connect gracefully if it runs and starts it again with the
// same properties, REST port and offsets file, waiting until the task is
// RUNNING (ctx without a deadline: two minutes).
func (c *Connect) Restart(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if err := c.stopLocked(ctx); err != nil {
		return err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	return c.startLocked(ctx)
}

// closeTimeout bounds the graceful stop in Close.
const closeTimeout = time.Minute

// Close stops Connect (gracefully, killing it after a minute) and removes
// the directory Start created (not Options.Dir). It is idempotent.
func (c *Connect) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	err := c.stopLocked(ctx)
	if c.ownDir {
		err = errors.Join(err, os.RemoveAll(c.dir))
	}
	return err
}

// PID returns the Connect JVM's process id, 0 while it is not running. The
// benchmark reads its CPU time and peak RSS from /proc.
func (c *Connect) PID() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.jvm == nil {
		return 0
	}
	return c.jvm.PID()
}

// Name returns the connector's name.
func (c *Connect) Name() string { return c.name }

// RESTAddr returns the REST listener's host:port.
func (c *Connect) RESTAddr() string { return c.restAddr }

// OffsetsFile returns the standalone worker's offsets file
// (offset.storage.file.filename); it exists once Connect flushed offsets.
func (c *Connect) OffsetsFile() string { return c.offsetsPath }

// LogPath returns Connect's log file (appended across restarts).
func (c *Connect) LogPath() string { return c.logPath }

// JVMLogPath returns the file with the JVM's own stdout and stderr.
func (c *Connect) JVMLogPath() string { return c.jvmLogPath }

// ConnectorProperties returns a copy of the connector properties Connect
// runs with; walbox's --debezium-config reads the same keys.
func (c *Connect) ConnectorProperties() map[string]string { return maps.Clone(c.connector) }

// ConnectorPropertiesFile returns the path of the connector .properties
// file Start wrote.
func (c *Connect) ConnectorPropertiesFile() string { return c.connectorPath }

// WorkerProperties returns a copy of the worker properties.
func (c *Connect) WorkerProperties() map[string]string { return maps.Clone(c.worker) }

// WorkerPropertiesFile returns the path of the worker .properties file.
func (c *Connect) WorkerPropertiesFile() string { return c.workerPath }

// JVMArgs returns the JVM flags Connect runs with.
func (c *Connect) JVMArgs() []string { return append([]string(nil), c.jvmArgs...) }

// LogTail returns the last n lines of Connect's log, for error messages.
func (c *Connect) LogTail(n int) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return fmt.Sprintf("(no Connect log: %v)", err)
	}
	return kafkatest.Tail(b, n)
}

// slotStreaming reports whether a walsender streams the connector's slot
// (state catchup or streaming: a backlog keeps it in catchup). It needs a
// user that may see pg_stat_replication's state, as the tests' superuser
// does.
func (c *Connect) slotStreaming(ctx context.Context) (bool, error) {
	cfg, err := pgx.ParseConfig("")
	if err != nil {
		return false, err
	}
	port, err := strconv.ParseUint(c.connector["database.port"], 10, 16)
	if err != nil {
		return false, fmt.Errorf("database.port %q: %w", c.connector["database.port"], err)
	}
	cfg.Host, cfg.Port = c.connector["database.hostname"], uint16(port)
	cfg.User, cfg.Password = c.connector["database.user"], c.connector["database.password"]
	cfg.Database = c.connector["database.dbname"]
	cfg.TLSConfig = nil // the test servers speak plain TCP; sslmode is walbox's concern
	cfg.Fallbacks = nil
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, err
	}
	defer conn.Close(context.Background())
	var ok bool
	err = conn.QueryRow(ctx, `
SELECT EXISTS (
    SELECT 1 FROM pg_replication_slots s JOIN pg_stat_replication r ON r.pid = s.active_pid
    WHERE s.slot_name = $1 AND r.state IN ('catchup', 'streaming'))`,
		c.connector["slot.name"]).Scan(&ok)
	return ok, err
}
