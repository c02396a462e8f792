package fulltest

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
)

func TestPickFollowsEnv(t *testing.T) {
	for _, tc := range []struct {
		name, value string
		want        int
	}{
		{"unset", "", 1},
		{"on", "1", 2},
		{"true is on", "true", 2},
		{"zero is off", "0", 1},
		{"garbage is off", "yes please", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(Env, tc.value)
			if got := Pick(1, 2); got != tc.want {
				t.Errorf("%s=%q: Pick(1, 2) = %d, want %d", Env, tc.value, got, tc.want)
			}
			if got := Enabled(); got != (tc.want == 2) {
				t.Errorf("%s=%q: Enabled() = %v", Env, tc.value, got)
			}
		})
	}
}

// TestMainParallel runs this test binary again and reads the -test.parallel
// Main left it: n in the short run, what -parallel says when given (go test
// passes -test.parallel only then), go test's default in the full run.
func TestMainParallel(t *testing.T) {
	if os.Getenv("FULLTEST_REPORT_PARALLEL") == "1" {
		fmt.Printf("parallel=%s\n", flag.Lookup("test.parallel").Value)
		return
	}
	for _, tc := range []struct {
		name, full string
		args       []string
		want       int
	}{
		{"short run", "", nil, 3},
		{"short run, -parallel given", "", []string{"-test.parallel=7"}, 7},
		{"full run", "1", nil, runtime.GOMAXPROCS(0)},
		{"full run, -parallel given", "1", []string{"-test.parallel=5"}, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], append([]string{"-test.run=^TestMainParallel$"}, tc.args...)...)
			cmd.Env = append(os.Environ(), "FULLTEST_REPORT_PARALLEL=1", Env+"="+tc.full)
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
			}
			if want := fmt.Sprintf("parallel=%d\n", tc.want); !strings.Contains(string(out), want) {
				t.Errorf("%s=%q %v: output %q, want %q", Env, tc.full, tc.args, out, want)
			}
		})
	}
}
