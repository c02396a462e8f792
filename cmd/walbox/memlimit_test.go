package main

import (
	"math"
	"runtime/debug"
	"testing"

	"github.com/walbox/walbox/config"
)

// TestMemoryLimitDefaults checks the soft memory limit walbox sets with its
// defaults. Without one (before issue 7, item 6) a 1M-row backlog drain
// peaked at up to 65.5 MiB RSS and a drain of 1 MB payloads at 69-74 MiB;
// walbox-bench measures the process, this checks the arithmetic: the limit
// leaves room for the binary's own pages under 64 MiB, and a full in-flight
// window fits under it, so the collector does not run constantly.
func TestMemoryLimitDefaults(t *testing.T) {
	d := config.Defaults()
	got := memoryLimit(d)
	if got > 40<<20 {
		t.Errorf("memoryLimit(defaults) = %.1f MiB, want at most 40 MiB (RSS also counts ~16 MiB of the binary's own pages; target 64 MiB)", float64(got)/(1<<20))
	}
	if window := d.MaxInflightBytes + int64(d.MaxInflightRecords)*memLimitPerRecord; got < window+8<<20 {
		t.Errorf("memoryLimit(defaults) = %d, want at least the in-flight window (%d) plus 8 MiB", got, window)
	}
	if d.MaxInflightBytes < int64(d.ProducerBatchMaxBytes) {
		t.Errorf("default max in-flight bytes %d below the default producer batch max %d", d.MaxInflightBytes, d.ProducerBatchMaxBytes)
	}
	// A larger window raises the limit with it.
	big := d
	big.MaxInflightBytes = 256 << 20
	if memoryLimit(big) <= 256<<20 {
		t.Errorf("memoryLimit with a 256 MiB window = %d, want above it", memoryLimit(big))
	}
}

func TestSetMemoryLimitRespectsGOMEMLIMIT(t *testing.T) {
	prev := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(prev) })
	d := config.Defaults()

	debug.SetMemoryLimit(math.MaxInt64)
	setMemoryLimit(d, func(k string) string {
		if k == "GOMEMLIMIT" {
			return "1GiB"
		}
		return ""
	})
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Errorf("with GOMEMLIMIT set, the limit became %d; want the user's left alone", got)
	}

	setMemoryLimit(d, func(string) string { return "" })
	if got := debug.SetMemoryLimit(-1); got != memoryLimit(d) {
		t.Errorf("without GOMEMLIMIT, the limit is %d, want memoryLimit = %d", got, memoryLimit(d))
	}
}
