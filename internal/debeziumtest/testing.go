package debeziumtest

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// RequireEnv names the environment variable that turns a machine unable to
// run Connect (no java, no mvn with an uncached classpath) into a test
// failure instead of a skip. CI sets it.
const RequireEnv = "WALBOX_REQUIRE_INTEGRATION"

// startTimeout bounds classpath resolution plus startup in StartT. A first
// run with an empty ~/.m2 downloads about 30 MB of jars through Maven.
const startTimeout = 5 * time.Minute

// StartT starts Connect for one test (Options.Dir defaults to a
// t.TempDir) and closes it in t.Cleanup, logging the end of Connect's log
// first if the test failed. When the machine cannot run Connect
// (ErrUnavailable) the test is skipped, unless WALBOX_REQUIRE_INTEGRATION=1,
// which makes it fail.
func StartT(t testing.TB, opts Options) *Connect {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir() // removed after Close, which is registered later
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	c, err := Start(ctx, opts)
	if err != nil {
		SkipUnavailable(t, err)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("debeziumtest: end of the Connect log (%s):\n%s", c.LogPath(), c.LogTail(40))
		}
		// Close only frees the JVM; a test that needs a graceful stop (its
		// offset flush) calls Stop and checks it. A slow stop on a loaded
		// machine, ended by a kill, is logged here, not a failure.
		switch err := c.Close(); {
		case errors.Is(err, ErrStopTimeout):
			t.Logf("debeziumtest: close Connect: %v", err)
		case err != nil:
			t.Errorf("debeziumtest: close Connect: %v", err)
		}
	})
	return c
}

// SkipUnavailable skips t when err says this machine cannot run Connect
// (it wraps ErrUnavailable: no java, or no mvn while the classpath is not
// cached); under WALBOX_REQUIRE_INTEGRATION=1 it fails t instead, since a
// required integration run must not pass by not running. Other errors are
// left to the caller.
func SkipUnavailable(t testing.TB, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) {
		return
	}
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("debeziumtest: %v (%s=1 forbids skipping: install java 17+ and maven)", err, RequireEnv)
	}
	t.Skipf("skipping Debezium test (set %s=1 to fail instead): %v", RequireEnv, err)
}
