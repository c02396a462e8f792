package patronitest

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// RequireEnv names the environment variable that turns a machine unable to
// run a Patroni cluster into a test failure instead of a skip.
const RequireEnv = "WALBOX_REQUIRE_INTEGRATION"

// RequireVersions returns the Versions of the given majors, skipping t
// (failing it under WALBOX_REQUIRE_INTEGRATION=1) for a major this machine
// cannot run Patroni with.
func RequireVersions(t testing.TB, majors ...int) []Version {
	t.Helper()
	have := map[int]Version{}
	for _, v := range Versions() {
		have[v.Major] = v
	}
	var out []Version
	var missing []int
	for _, m := range majors {
		if v, ok := have[m]; ok {
			out = append(out, v)
		} else {
			missing = append(missing, m)
		}
	}
	if len(missing) > 0 {
		msg := "no PostgreSQL %v with pg_basebackup, pg_rewind and pg_controldata for Patroni (Debian's postgresql-N packages have them; run `go run ./internal/patronitest/cmd/patroniinstall` for 17)"
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf(msg, missing)
		}
		if len(out) == 0 {
			t.Skipf(msg+" (set %s=1 to fail instead)", missing, RequireEnv)
		}
		t.Logf(msg+"; running the others", missing)
	}
	return out
}

// Start starts a cluster for one test and closes it in t.Cleanup, logging
// the end of every log first if the test failed. When the machine cannot
// run one (ErrUnavailable) the test is skipped, unless
// WALBOX_REQUIRE_INTEGRATION=1.
func Start(t testing.TB, opts Options) *Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, opts)
	if err != nil {
		if errors.Is(err, ErrUnavailable) && os.Getenv(RequireEnv) != "1" {
			t.Skipf("skipping the Patroni test (set %s=1 to fail instead): %v", RequireEnv, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("patronitest: end of the logs:\n%s", c.LogTails(60))
		}
		c.Close()
	})
	return c
}
