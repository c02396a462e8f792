package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/walbox/walbox/internal/childproc"
)

// BuildWalbox builds ./cmd/walbox into dir and returns the binary's path.
// It runs `go build` in the working directory, which must be inside the
// walbox module (as with `go run ./cmd/walbox-bench`).
func BuildWalbox(ctx context.Context, dir string) (string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	out := filepath.Join(dir, "walbox")
	cmd := exec.CommandContext(ctx, goBin, "build", "-o", out, "github.com/walbox/walbox/cmd/walbox")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/walbox: %w\n%s", err, b)
	}
	return out, nil
}

// walboxProc is walbox run as its own process with its default settings
// (only the connection, slot, publication, topic template, status interval
// and linger are given), so its peak RSS can be read from /proc. Every
// scenario runs walbox this way; the in-process walboxRelay is added only
// for a CPU profile. The drain is detected from the slot, which walbox
// confirms only once Kafka acknowledged everything before it.
type walboxProc struct {
	env     *Env
	bin     string
	slot    string
	prefix  string
	linger  time.Duration
	logPath string
	name    string   // relay name; empty is walboxName
	args    []string // extra arguments before the benchmark-wide ones (NewWalboxEOS)
	// extraEnv is added to the process's environment (NewWalboxTraced).
	extraEnv []string

	cmd    *exec.Cmd
	exited chan error
}

var _ slotRelay = (*walboxProc)(nil)

// NewWalboxProcess returns walbox run from bin, logging to logPath.
func (e *Env) NewWalboxProcess(bin, slot, prefix string, linger time.Duration, logPath string) *walboxProc {
	return &walboxProc{env: e, bin: bin, slot: slot, prefix: prefix, linger: linger, logPath: logPath}
}

// walboxName is the relay name of walbox run as its own process, the one
// the comparisons use.
const walboxName = "walbox"

func (w *walboxProc) Name() string {
	if w.name != "" {
		return w.name
	}
	return walboxName
}
func (w *walboxProc) Slot() string       { return w.slot }
func (w *walboxProc) ConfirmsSlot() bool { return true }
func (w *walboxProc) Topics() []string {
	return []string{w.prefix + ".order", w.prefix + ".customer"}
}

// Done is unknown from outside the process; drains of a walboxProc wait for
// the slot instead (see waitDrain).
func (w *walboxProc) Done() int64 { return -1 }

func (w *walboxProc) Err() error {
	select {
	case err := <-w.exited:
		w.exited <- err
		return fmt.Errorf("walbox exited early (%v); see %s", err, w.logPath)
	default:
		return nil
	}
}

func (w *walboxProc) Start(ctx context.Context) error {
	if _, err := w.env.CreateSlot(ctx, w.slot); err != nil {
		return err
	}
	logf, err := os.Create(w.logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	w.cmd = exec.Command(w.bin, "run",
		"--pg-dsn", w.env.DSN(),
		"--kafka-brokers", strings.Join(w.env.Brokers, ","),
		"--slot", w.slot,
		"--publication", Publication,
		"--topic", w.prefix+".{aggregate_type}",
		"--status-interval", statusInterval.String(),
		"--producer-linger", w.linger.String(),
		"--metrics-addr", "127.0.0.1:0",
		"--log-format", "text",
	)
	w.cmd.Args = append(append(w.cmd.Args, w.args...), w.env.WalboxArgs...)
	var env []string
	for _, kv := range os.Environ() {
		// OTEL_*: tracing is on only in the runs that ask (tracing.go).
		if !strings.HasPrefix(kv, "WALBOX_") && !strings.HasPrefix(kv, "GOMEMLIMIT=") && !strings.HasPrefix(kv, "GOGC=") && !strings.HasPrefix(kv, "OTEL_") {
			env = append(env, kv)
		}
	}
	env = append(env, w.env.WalboxEnv...)
	env = append(env, w.extraEnv...)
	w.cmd.Env = env
	w.cmd.Stdout, w.cmd.Stderr = logf, logf
	// The relay must not outlive the benchmark, whatever kills it.
	w.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	child, err := childproc.Start(w.cmd)
	if err != nil {
		return fmt.Errorf("start walbox: %w", err)
	}
	w.exited = make(chan error, 1)
	go func() { w.exited <- child.Wait() }()
	return nil
}

// PID is the process id.
func (w *walboxProc) PID() int { return w.cmd.Process.Pid }

// PeakRSS returns the process's peak resident set size so far (VmHWM), in
// bytes. It must be called before Stop.
func (w *walboxProc) PeakRSS() (int64, error) {
	if w.cmd == nil {
		return 0, errors.New("walbox is not running")
	}
	return peakRSS(w.PID())
}

func (w *walboxProc) Stop() error {
	if w.cmd == nil {
		return nil
	}
	defer func() { w.cmd = nil }()
	select {
	case err := <-w.exited:
		return fmt.Errorf("walbox had exited: %v; see %s", err, w.logPath)
	default:
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-w.exited:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return fmt.Errorf("walbox exited with %v; see %s", err, w.logPath)
		}
		return err
	case <-time.After(40 * time.Second):
		_ = w.cmd.Process.Kill()
		<-w.exited
		return fmt.Errorf("walbox did not stop within 40s of SIGTERM and was killed; see %s", w.logPath)
	}
}
