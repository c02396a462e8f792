package main

import (
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/version"
)

// TestVersion: `walbox version` and `walbox --version` print the build's
// identity from internal/version on stdout, exit 0.
//
// Regression (issue 21): --version printed "dev" whatever was built, even
// for `go install ...@v1.2.3`.
func TestVersion(t *testing.T) {
	want := "walbox " + version.Get().String() + "\n"
	for _, arg := range []string{"version", "--version"} {
		var stdout, stderr strings.Builder
		if code := mainCode([]string{arg}, func(string) string { return "" }, &stdout, &stderr); code != exitOK {
			t.Errorf("walbox %s: exit %d, stderr %s", arg, code, stderr.String())
		}
		if stdout.String() != want {
			t.Errorf("walbox %s printed %q, want %q", arg, stdout.String(), want)
		}
		if !strings.Contains(stdout.String(), "(revision ") {
			t.Errorf("walbox %s does not say the revision: %q", arg, stdout.String())
		}
	}
}
