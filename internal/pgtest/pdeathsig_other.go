//go:build !linux

package pgtest

import "syscall"

// setParentDeathSignal does nothing off Linux: a server whose test process
// is killed keeps running there until stopped by hand.
func setParentDeathSignal(*syscall.SysProcAttr) {}
