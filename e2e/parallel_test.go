package e2e

// Why the longer tests of this package call parallel(t).
//
// They spend most of their time waiting (for a JVM, a restart, a Kafka
// outage of 12 s, a consumer to see every event): the whole package used
// about 100 CPU seconds in 260 s on two cores. Each such test starts its own
// PostgreSQL (internal/pgtest) and Kafka broker (internal/kafkatest) or
// kfake cluster, its own walbox processes with their own spool directory
// (the default one holds a directory per process) and metrics on a free port
// (WALBOX_METRICS_ADDR=127.0.0.1:0: an empty value means the default
// 127.0.0.1:9187), so two of them share nothing but the built binary. Three
// of them run at a time in the short run (TestMain; an explicit -parallel
// wins), after the package's other tests; none asserts a duration, so
// running beside another only makes it slower. Three, not GOMAXPROCS (2 on
// two cores): this package and pipeline are the short run's two longest,
// and with two at a time this one ended last, 100 s after it started.
//
// Only in the short run: the full run's long suites (the fault table, the
// SIGKILL loops) keep the machine to themselves, so their figures stay
// comparable from run to run.

import (
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

// parallel marks t parallel in the short run (see above).
func parallel(t *testing.T) { fulltest.Parallel(t) }
