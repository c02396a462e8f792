package main

import (
	"slices"
	"strings"
	"testing"
)

// usageBlock is the synopsis of slotctl's help: the lines after "Usage:"
// up to the first blank line.
func usageBlock(t *testing.T, help string) []string {
	t.Helper()
	_, after, ok := strings.Cut(help, "Usage:\n")
	if !ok {
		t.Fatalf("help has no Usage: section:\n%s", help)
	}
	block, _, _ := strings.Cut(after, "\n\n")
	return strings.Split(block, "\n")
}

// TestUsageSynopsisNamesEveryCommand: the synopsis a user sees first
// (`slotctl --help`, and `slotctl` alone on stderr) lists every command of
// the command table with the flags it is run with, and says how to pass the
// DSN.
//
// Regression (issue 15): a newcomer following the quickstart found no
// --slot on drop and no word on the DSN in the synopsis: every line said
// only "[flags]", and --pg-dsn / WALBOX_PG_DSN appeared only pages below.
func TestUsageSynopsisNamesEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, nil} {
		r := invocation{}.run(t, args...)
		help := r.stdout
		if args == nil {
			help = r.stderr
		}
		lines := usageBlock(t, help)
		synopsis := strings.Join(lines, "\n")
		names := make([]string, 0, len(commands))
		for name := range commands {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			i := slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  slotctl "+name+" ") })
			if i < 0 {
				t.Errorf("slotctl %v: synopsis lacks a line for %q:\n%s", args, name, synopsis)
				continue
			}
			if strings.Contains(lines[i], "[flags]") {
				t.Errorf("slotctl %v: synopsis of %q says only [flags]: %q", args, name, lines[i])
			}
		}
		for _, want := range []string{"--slot NAME", "--pg-dsn DSN", "WALBOX_PG_DSN", "--config FILE", "slotctl help"} {
			if !strings.Contains(synopsis, want) {
				t.Errorf("slotctl %v: synopsis lacks %q:\n%s", args, want, synopsis)
			}
		}
		drop := lines[slices.IndexFunc(lines, func(l string) bool { return strings.HasPrefix(l, "  slotctl drop ") })]
		if !strings.Contains(drop, "--slot") {
			t.Errorf("slotctl %v: drop's synopsis does not say --slot: %q", args, drop)
		}
	}
}
