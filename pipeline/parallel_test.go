package pipeline_test

// Why some integration tests of this package call parallel(t).
//
// The package's run is spent waiting, not computing (about 55 CPU seconds
// in a 60 s run on a two-core machine): for a standby to catch up, a
// failover, a retry interval, a consumer to see every event. Tests that
// share nothing (each starts its own PostgreSQL, Kafka broker or kfake
// cluster, registry and spool directory) and assert no duration run 4 at a
// time (TestMain; an explicit -parallel wins), after the package's other
// tests: the integration tests, the streaming suites (each asserts from
// pg_stat_replication_slots that its transactions streamed, which load does
// not change) and the in-package kfake exactly-once tests
// (parallel_internal_test.go). Go runs a package's serial tests before its
// parallel ones, so every serial test is time the others cannot overlap:
// what stays serial is what measures the process (the spool's heap and
// RSS) or has a margin of time that load could eat: the heartbeat's stall,
// the 1,000,000-row transaction under wal_sender_timeout = 4s (a keepalive
// every 2 s), the kfake exactly-once tests whose commit is due within a
// few hundred milliseconds of a transaction timeout, and the retry test
// whose server is down for seconds (a parallel test's free port could take
// its port before the restart).
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
