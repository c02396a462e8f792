// Command patroniinstall puts in place what internal/patronitest runs:
// a Python venv with Patroni and psycopg2, and a PostgreSQL 17 build with
// the tools Patroni needs, in patronitest.Dir(). It does nothing for what
// is already there; .ci/run calls it before the tests.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/walbox/walbox/internal/patronitest"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := patronitest.Install(ctx, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, v := range patronitest.Versions() {
		fmt.Fprintf(os.Stderr, "patroniinstall: PostgreSQL %d for Patroni in %s\n", v.Major, v.BinDir)
	}
}
