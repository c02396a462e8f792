//go:build !linux

package kafkatest

import (
	"errors"
	"os"
	"os/exec"
)

// supported is false: without Linux's parent-death signal a broker JVM
// could outlive a crashed test, so StartBroker refuses to run one.
const supported = false

type proc struct {
	done chan struct{}
	err  error
}

func setGroupKill(*exec.Cmd) {}

func runTool(cmd *exec.Cmd) error { return cmd.Run() }

func spawn(string, []string, string, *os.File) (*proc, error) {
	return nil, errors.ErrUnsupported
}

func (p *proc) pid() int     { return 0 }
func (p *proc) exited() bool { return true }
func (p *proc) terminate()   {}
func (p *proc) kill()        {}

func freeSpace(string) uint64 { return 0 }
