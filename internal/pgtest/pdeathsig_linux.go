package pgtest

import "syscall"

// setParentDeathSignal makes the kernel send postgres SIGQUIT when the
// thread that started it exits, so no server outlives a killed test.
func setParentDeathSignal(attr *syscall.SysProcAttr) { attr.Pdeathsig = syscall.SIGQUIT }
