//go:build linux

package registrytest

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// process is the registry's JVM, in its own process group, SIGKILLed by the
// kernel if the test binary dies first.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// spawn starts java; the goroutine that forks it keeps its OS thread
// locked until the JVM exits, because Linux sends the parent-death signal
// when the forking thread ends.
func spawn(java string, args []string, dir string, out *os.File) (*process, error) {
	p := &process{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the JVM
		cmd := exec.Command(java, args...)
		cmd.Dir = dir
		cmd.Stdout, cmd.Stderr = out, out
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.cmd = cmd
		started <- nil
		_ = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *process) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// runTool runs mvn with the OS thread locked (the parent-death signal
// follows the forking thread) in its own process group, killed as a group
// when ctx ends: mvn is a script that may leave its java behind otherwise.
func runTool(cmd *exec.Cmd) error {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Run()
}

// lockFile takes an exclusive lock on path, waiting for another holder.
func lockFile(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { _ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}
