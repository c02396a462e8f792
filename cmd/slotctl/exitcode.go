package main

import (
	"errors"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/slotctl"
)

// Exit codes of slotctl, all decided here.
const (
	exitOK    = 0 // the command did what was asked
	exitError = 1 // it failed, or (inspect) found something missing or wrong
	exitUsage = 2 // bad command line or configuration: unknown command or flag, missing --pg-dsn, malformed value, drop or advance without --yes off a terminal
	// exitRefused: refused for safety, nothing changed: the slot is in use
	// (drop, advance), or advance would move it backwards.
	exitRefused = 3
)

// usageError marks an error in how slotctl was invoked.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// exitCode maps a command's error to the process exit code.
func exitCode(err error) int {
	var u usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &u), errors.Is(err, config.ErrInvalid), errors.Is(err, slotctl.ErrInvalidConfig):
		return exitUsage
	case errors.Is(err, slotctl.ErrSlotActive), errors.Is(err, slotctl.ErrAdvanceBackwards):
		return exitRefused
	default:
		return exitError
	}
}
