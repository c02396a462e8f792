package childproc_test

import (
	"errors"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/childproc"
)

// TestChildOutlivesTheStartersThread: a goroutine starts one child plainly
// and one through Start, both with a parent-death signal, then locks its
// thread and ends, which retires the thread. The plain child is killed
// (the harm this package exists for); the other lives on.
func TestChildOutlivesTheStartersThread(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	newCmd := func() *exec.Cmd {
		cmd := exec.Command(sleep, "60")
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		return cmd
	}
	plain, guarded := newCmd(), newCmd()
	var p *childproc.Proc
	errMainThread := errors.New("on the main thread")
	// Holding this goroutine's thread sends the starter to another one.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	for tries := 0; ; tries++ {
		errc := make(chan error, 1)
		go func() {
			runtime.LockOSThread() // both forks from this thread, which dies when the goroutine ends
			if syscall.Gettid() == syscall.Getpid() {
				// The runtime never ends the main thread: try another.
				runtime.UnlockOSThread()
				errc <- errMainThread
				return
			}
			if err := plain.Start(); err != nil {
				errc <- err
				return
			}
			var err error
			p, err = childproc.Start(guarded)
			errc <- err
		}()
		err := <-errc
		if err == nil {
			break
		}
		if !errors.Is(err, errMainThread) || tries == 100 {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = guarded.Process.Kill()
		_ = p.Wait()
	})

	plainDone := make(chan error, 1)
	go func() { plainDone <- plain.Wait() }()
	select {
	case err := <-plainDone:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("the plainly started child ended with %v, want killed by its parent-death signal", err)
		}
	case <-time.After(30 * time.Second):
		_ = plain.Process.Kill()
		t.Fatal("the plainly started child still runs 30 s after its forking thread ended: the test no longer shows the hazard")
	}
	// The starter's thread is gone (the plain child's death says so): the
	// child started through Start must still run.
	select {
	case <-p.Done():
		t.Fatalf("the child started through Start ended with %v when its caller's thread ended", p.Wait())
	default:
	}
	if err := guarded.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the child started through Start is gone: %v", err)
	}
}
