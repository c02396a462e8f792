package pgtest

import (
	"runtime"
	"testing"
)

// recordTB records whether a helper skipped or failed the test; both end
// the calling goroutine, as they do on a real *testing.T.
type recordTB struct {
	testing.TB
	skipped, failed bool
}

func (r *recordTB) Helper()               {}
func (r *recordTB) Skip(...any)           { r.skipped = true; runtime.Goexit() }
func (r *recordTB) Skipf(string, ...any)  { r.skipped = true; runtime.Goexit() }
func (r *recordTB) Fatal(...any)          { r.failed = true; runtime.Goexit() }
func (r *recordTB) Fatalf(string, ...any) { r.failed = true; runtime.Goexit() }
func (r *recordTB) Logf(string, ...any)   {}
func (r *recordTB) Errorf(string, ...any) { r.failed = true }
func (r *recordTB) Cleanup(func())        {}

// call runs f with a recordTB in its own goroutine, so that Skip and Fatal
// end only that goroutine.
func call(t *testing.T, f func(testing.TB)) *recordTB {
	r := &recordTB{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	return r
}

// TestRequireBinDirConsultsRequireEnv checks that a machine without
// PostgreSQL skips a test that needs the binaries, but fails it under
// WALBOX_REQUIRE_INTEGRATION=1. TestStartServerFailureIncludesLog and
// TestForEachVersionRunsTheDefault used to call t.Skip themselves and so
// skipped even in CI; they now go through RequireBinDir.
func TestRequireBinDirConsultsRequireEnv(t *testing.T) {
	for _, tt := range []struct {
		require            string
		wantSkip, wantFail bool
	}{
		{require: "", wantSkip: true},
		{require: "1", wantFail: true},
	} {
		t.Run("require="+tt.require, func(t *testing.T) {
			t.Setenv("PG_BIN", t.TempDir()) // no initdb there
			t.Setenv(RequireEnv, tt.require)
			r := call(t, func(tb testing.TB) { RequireBinDir(tb) })
			if r.skipped != tt.wantSkip || r.failed != tt.wantFail {
				t.Errorf("RequireBinDir without binaries, %s=%q: skipped %v, failed %v; want skipped %v, failed %v",
					RequireEnv, tt.require, r.skipped, r.failed, tt.wantSkip, tt.wantFail)
			}
		})
	}
}
