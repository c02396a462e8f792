package pipeline_test

// Why some integration tests of this package call parallel(t).
//
// The package's run is spent waiting, not computing (about 70 CPU seconds
// in 300 s on a loaded two-core machine): for a standby to catch up, a
// failover, a retry interval, a consumer to see every event. The longest
// tests that share nothing (each starts its own PostgreSQL, Kafka broker or
// kfake cluster, registry and spool directory) and assert no duration run
// 4 at a time (TestMain; an explicit -parallel wins), after the package's
// other tests: 23 of them, about 100 s of waiting. Tests
// whose point is a timing (the heartbeat's, a 1M-row transaction under
// wal_sender_timeout = 4s) stay serial, and so do the streaming suites.
//
// Only in the short run: the full run's long suites (the fault table, the
// SIGKILL loops, the 1,000,000-row transaction) keep the machine to
// themselves, so their figures stay comparable from run to run.

import (
	"os"
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

// TestMain lets 4 of those tests run at a time in the short run, not
// GOMAXPROCS (2 on two cores): they mostly wait, and this package's run is
// the last of the short run to end.
func TestMain(m *testing.M) { os.Exit(fulltest.Main(m, 4)) }

// parallel marks t parallel in the short run (see above).
func parallel(t *testing.T) { fulltest.Parallel(t) }
