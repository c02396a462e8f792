//go:build !linux

package main

import "os"

// isTerminal reports whether f is a character device. Off Linux this is an
// approximation (/dev/null passes), which at worst makes drop prompt and
// read end-of-file: nothing is dropped unconfirmed.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
