package pipeline

import (
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

// parallel marks an in-package test parallel in the short run, as the
// external tests' parallel does (parallel_test.go says which tests and why):
// the kfake-backed exactly-once tests each build their own cluster, loop
// and registry, so they run beside the package's waiting integration tests
// instead of before them; the three whose commit must beat a transaction
// timeout of under a second by a few hundred milliseconds
// (TestEOSTransactionTimeoutRestartsTheSession, TestEOSSplitsByAge,
// TestEOSCommitsWholeTransactionsBeforeHalfTheTimeout) stay serial.
func parallel(t *testing.T) { fulltest.Parallel(t) }
