package childproc

import (
	"os/exec"
	"runtime"
)

// Proc is a child started by Start.
type Proc struct {
	done chan struct{}
	err  error // cmd.Wait's result; read only after done is closed
}

// Start starts cmd on a goroutine that keeps its OS thread locked until
// cmd has exited and been reaped; the thread then ends with the goroutine.
// The caller must not call cmd.Wait: Proc.Wait returns its result.
func Start(cmd *exec.Cmd) (*Proc, error) {
	p := &Proc{done: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine, after the child
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		p.err = cmd.Wait()
		close(p.done)
	}()
	if err := <-started; err != nil {
		return nil, err
	}
	return p, nil
}

// Done is closed once the child has exited.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Wait waits for the child to exit and returns cmd.Wait's result.
func (p *Proc) Wait() error {
	<-p.done
	return p.err
}

// CombinedOutput runs cmd to its end, as cmd.CombinedOutput does, with the
// calling goroutine's OS thread locked meanwhile.
func CombinedOutput(cmd *exec.Cmd) ([]byte, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.CombinedOutput()
}
