// Package fulltest separates the short test run, the one `go test ./...`
// does on a newcomer's laptop in a few minutes, from the long suites that
// CI runs: the full fault table, the kill loops, the exactly-once soak, the
// Debezium byte-for-byte comparison and every PostgreSQL version.
//
// The short run still proves the product end to end against real servers
// (delivery, per-aggregate order, ack-ordered confirmation, a crash, a Kafka
// outage, a Postgres restart); a long suite only repeats those faults more
// often, for longer, on more versions or in more corners. Turning a test
// into a long one is a statement that the short run already covers what it
// proves at least once.
package fulltest

import (
	"flag"
	"os"
	"strconv"
	"testing"
)

// Env names the environment variable that turns the long suites on.
// `.ci/run` sets it; the README's test command leaves it unset.
const Env = "WALBOX_TEST_FULL"

// Enabled reports whether the long suites run: WALBOX_TEST_FULL=1 (or any
// value strconv.ParseBool reads as true).
func Enabled() bool {
	on, err := strconv.ParseBool(os.Getenv(Env))
	return err == nil && on
}

// Require skips the calling test unless the long suites are on. why says
// what the test adds to the short run, so a skipped line tells a reader
// what they did not run.
func Require(t testing.TB, why string) {
	t.Helper()
	if !Enabled() {
		t.Skipf("long suite (%s): set %s=1 to run it", why, Env)
	}
}

// Pick returns full when the long suites are on and short otherwise: the
// size of a loop, a soak's length, a row count.
func Pick[T any](short, full T) T {
	if Enabled() {
		return full
	}
	return short
}

// Parallel marks t parallel in the short run only, where a package's
// waiting tests run side by side (Main sets how many); the full run's long
// suites keep the machine to themselves.
func Parallel(t *testing.T) {
	if !Enabled() {
		t.Parallel()
	}
}

// Main runs m, a test binary whose waiting tests mark themselves parallel
// in the short run, with up to n of them at a time there instead of `go
// test`'s default -parallel (GOMAXPROCS, 2 on a two-core machine): those
// tests mostly wait (for servers, restarts, consumers), not compute, so
// more of them at once shorten the package's run without asking for CPU
// the machine lacks. An explicit -parallel wins, and the full run is left
// alone (its long suites run serially). TestMain calls it:
//
//	func TestMain(m *testing.M) { os.Exit(fulltest.Main(m, 4)) }
func Main(m *testing.M, n int) int {
	flag.Parse()
	if !Enabled() && !flagSet("test.parallel") {
		if err := flag.Set("test.parallel", strconv.Itoa(n)); err != nil {
			panic("fulltest: -test.parallel: " + err.Error())
		}
	}
	return m.Run()
}

func flagSet(name string) bool {
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == name })
	return set
}
