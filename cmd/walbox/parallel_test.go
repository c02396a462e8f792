package main

// Why some tests of this package call parallel(t).
//
// The longest tests run walbox in the test process against a PostgreSQL
// server and a kfake cluster (or schema registry) of their own, and mostly
// wait: for a relay to stream, a standby to stand by, a replay to finish.
// Those that share nothing with the others (no package variable set, no
// environment, each relay its own metrics address and spool subdirectory)
// and assert no duration run up to 4 at a time in the short run, after the
// package's other tests (TestMain). Only in the short run, as in pipeline
// and e2e: the full run keeps them serial.

import (
	"os"
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

func TestMain(m *testing.M) { os.Exit(fulltest.Main(m, 4)) }

// parallel marks t parallel in the short run (see above).
func parallel(t *testing.T) { fulltest.Parallel(t) }
