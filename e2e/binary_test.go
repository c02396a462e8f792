package e2e

import (
	"context"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/childproc"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/walboxbin"
)

func TestMain(m *testing.M) {
	code := fulltest.Main(m, 3) // see parallel_test.go
	walboxbin.Cleanup()
	os.Exit(code)
}

// walboxBinary is ./cmd/walbox, built once per test binary.
func walboxBinary(t *testing.T) string { return walboxbin.Path(t) }

// proc is one running walbox process.
type proc struct {
	cmd    *exec.Cmd
	stderr *logbuf.Buffer
	done   chan struct{}
	err    error
}

func startWalbox(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startWalboxCmd(t, env, append([]string{"run"}, args...)...)
}

// startWalboxCmd starts the walbox binary with args (the subcommand first).
func startWalboxCmd(t *testing.T, env []string, args ...string) *proc {
	t.Helper()
	return startWalboxOut(t, env, nil, args...)
}

// startWalboxOut starts the walbox binary with args (the subcommand
// first), its stderr in the returned proc and its stdout in stdout, or
// with stderr when stdout is nil. It is killed when the test ends, and its
// output logged if the test failed.
func startWalboxOut(t *testing.T, env []string, stdout *logbuf.Buffer, args ...string) *proc {
	t.Helper()
	cmd := exec.Command(walboxBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, stderr: &logbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr, cmd.Stdout = p.stderr, p.stderr
	if stdout != nil {
		cmd.Stdout = stdout
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	child, err := childproc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = child.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			t.Logf("walbox %v (pid %d) stderr:\n%s", args, cmd.Process.Pid, p.stderr.Tail(8000))
			if stdout != nil {
				t.Logf("stdout:\n%s", stdout.Tail(2000))
			}
		}
	})
	return p
}

func (p *proc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// stop sends sig and waits for the exit; it returns the exit code.
func (p *proc) stop(t *testing.T, sig syscall.Signal, timeout time.Duration) int {
	t.Helper()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("walbox did not exit within %s of %s", timeout, sig)
	}
	return p.cmd.ProcessState.ExitCode()
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// waitUntil polls cond until it holds or the deadline passes.
func waitUntil(ctx context.Context, t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(25 * time.Millisecond) // polling interval, not synchronisation
	}
}
