package kafkatest

import (
	"os"
	"os/exec"
	"runtime"
	"syscall"
)

// supported reports whether this OS can run brokers: the parent-death
// signal that keeps a JVM from outliving the test exists only on Linux.
const supported = true

// sysProcAttr puts the JVM in its own process group, so a Ctrl-C meant for
// `go test` does not stop the broker behind the test's back and Kill can end
// the group, and asks the kernel to SIGKILL it if we die first.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// setGroupKill makes a short-lived command (mvn, the storage formatter) die
// with us and be killed as a group when its context ends: mvn is a shell
// script that may leave its java behind otherwise.
func setGroupKill(cmd *exec.Cmd) {
	cmd.SysProcAttr = sysProcAttr()
	cmd.Cancel = func() error {
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
}

// runTool runs a short-lived child (mvn, the storage formatter) prepared
// by setGroupKill. The OS thread stays locked while it runs: the
// parent-death signal fires when the thread that forked the child exits,
// and a thread the runtime hands to a goroutine that locks it and ends
// would take the child down with it.
func runTool(cmd *exec.Cmd) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Run()
}

// proc is one run of a broker JVM.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{} // closed once the JVM has exited and been reaped
	err  error         // Wait's result; read only after done is closed
}

// spawn starts a broker JVM writing its stdout and stderr to out. The
// goroutine that starts it keeps its OS thread locked until the JVM exits:
// Linux sends the parent-death signal when the *thread* that forked the
// child exits, and the Go runtime may retire a thread that a locked
// goroutine ended on.
func spawn(java string, args []string, dir string, out *os.File) (*proc, error) {
	p := &proc{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine, after the JVM
		cmd := exec.Command(java, args...)
		cmd.Dir = dir
		cmd.Stdout = out
		cmd.Stderr = out
		cmd.SysProcAttr = sysProcAttr()
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

// pid returns the JVM's process id (also its process group id).
func (p *proc) pid() int { return p.cmd.Process.Pid }

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// terminate asks the JVM to shut down: Kafka's SIGTERM handler runs a
// controlled shutdown and flushes the logs.
func (p *proc) terminate() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
}

// kill sends SIGKILL to the JVM's whole process group and waits until the
// JVM has been reaped.
func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// freeSpace returns the bytes available to us on the file system holding
// dir, or 0 if it cannot tell.
func freeSpace(dir string) uint64 {
	var st syscall.Statfs_t
	if syscall.Statfs(dir, &st) != nil {
		return 0
	}
	return st.Bavail * uint64(st.Bsize)
}
