package main

import (
	"testing"

	"github.com/walbox/walbox/internal/version"
)

// TestVersion: `slotctl version` and `slotctl --version` print the build's
// identity on stdout without needing a database.
func TestVersion(t *testing.T) {
	want := "slotctl " + version.Get().String() + "\n"
	for _, arg := range []string{"version", "--version"} {
		r := invocation{}.run(t, arg)
		if r.code != exitOK || r.stdout != want {
			t.Errorf("slotctl %s: exit %d, stdout %q, want %q; stderr %s", arg, r.code, r.stdout, want, r.stderr)
		}
	}
}
