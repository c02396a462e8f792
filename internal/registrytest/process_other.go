//go:build !linux

package registrytest

import (
	"fmt"
	"os"
	"os/exec"
)

type process struct{}

func spawn(string, []string, string, *os.File) (*process, error) {
	return nil, fmt.Errorf("%w: only on Linux (the JVM needs a parent-death signal)", ErrUnavailable)
}

func (*process) pid() int     { return 0 }
func (*process) exited() bool { return true }
func (*process) kill()        {}
func runTool(*exec.Cmd) error { return fmt.Errorf("%w: only on Linux", ErrUnavailable) }

func lockFile(string) (func(), error) { return func() {}, nil }
