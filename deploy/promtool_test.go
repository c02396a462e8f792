package deploy

import (
	"os"
	"os/exec"
	"testing"
)

// requireEnv makes a missing promtool a failure instead of a skip, as for
// the other integration tests (CI sets it; .ci/run installs promtool).
const requireEnv = "WALBOX_REQUIRE_INTEGRATION"

func promtool(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("promtool not found (%v); install Debian's prometheus package, which provides it", err)
		}
		t.Skipf("skipping: promtool not found (set %s=1 to fail instead; Debian's prometheus package provides it): %v", requireEnv, err)
	}
	return path
}

// TestAlertRules runs `promtool check rules` on the shipped rules and
// `promtool test rules` on their unit tests, which fire and do not fire
// every alert.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	for _, args := range [][]string{
		{"check", "rules", "prometheus/alerts.yaml"},
		{"test", "rules", "prometheus/alerts_test.yaml"},
	} {
		out, err := exec.CommandContext(t.Context(), bin, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}
