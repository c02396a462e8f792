package pipeline

import (
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

// parallel marks an in-package test parallel in the short run, as the
// external tests' parallel does (parallel_test.go says which tests and why):
// the kfake-backed exactly-once tests each build their own cluster, loop
// and registry and assert no duration, so they run beside the package's
// waiting integration tests instead of before them.
func parallel(t *testing.T) { fulltest.Parallel(t) }
