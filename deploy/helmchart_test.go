package deploy

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

// chartDir is the chart, relative to this package.
const chartDir = "helm/walbox"

// chartValueSets are the values the chart is rendered with: the defaults,
// the defaults on a cluster serving the Prometheus Operator's API, and the
// TLS + SASL + exactly-once example.
var chartValueSets = []struct {
	name        string
	values      []string
	apiVersions []string
}{
	{name: "default values"},
	{name: "default values, Prometheus Operator installed", apiVersions: []string{"monitoring.coreos.com/v1"}},
	{name: "TLS, SASL and exactly-once", values: []string{chartDir + "/ci/tls-sasl-exactly-once-values.yaml"}},
}

// helmBinary returns helm's path, or skips the test without it, unless
// WALBOX_REQUIRE_INTEGRATION=1, which makes that a failure.
func helmBinary(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("helm")
	if err != nil {
		msg := "helm not found; install it with `go install helm.sh/helm/v3/cmd/helm@v3.22.0`"
		if os.Getenv(requireEnv) == "1" {
			t.Fatalf("%s: %v", msg, err)
		}
		t.Skipf("skipping: %s (set %s=1 to fail instead): %v", msg, requireEnv, err)
	}
	return path
}

// TestHelmChartTyped runs the chart's typed tests (helm_test.go, build tag
// helmchart) in the full run, as their own `go test`: they decode every
// object into the k8s.io/api and Prometheus Operator types, whose compile
// the short run leaves out. The short run lints and renders the chart
// (TestHelmChartRenders) without decoding it.
func TestHelmChartTyped(t *testing.T) {
	if !fulltest.Enabled() {
		t.Skip("full run only (WALBOX_TEST_FULL=1): compiles the Kubernetes API types")
	}
	helmBinary(t)
	cmd := exec.CommandContext(t.Context(), "go", "test", "-count=1", "-tags", "helmchart",
		"-run", "^(TestHelmChart|TestStrictDecode)$", "-v", ".")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	// A filter that matched nothing would pass silently.
	for _, name := range []string{"TestHelmChart", "TestStrictDecode"} {
		if !bytes.Contains(out, []byte("--- PASS: "+name+" ")) {
			t.Errorf("%s did not run:\n%s", name, out)
		}
	}
}

// TestHelmChartRenders: `helm lint --strict` and `helm template` succeed for
// every value set, so a template error fails the short run too.
func TestHelmChartRenders(t *testing.T) {
	helm := helmBinary(t)
	for _, vs := range chartValueSets {
		t.Run(vs.name, func(t *testing.T) {
			var args []string
			for _, v := range vs.values {
				args = append(args, "--values", v)
			}
			lint := append([]string{"lint", "--strict", chartDir}, args...)
			if out, err := exec.CommandContext(t.Context(), helm, lint...).CombinedOutput(); err != nil {
				t.Errorf("helm %s: %v\n%s", strings.Join(lint, " "), err, out)
			}
			for _, a := range vs.apiVersions {
				args = append(args, "--api-versions", a)
			}
			tmpl := append([]string{"template", "walbox", chartDir, "--namespace", "cdc"}, args...)
			out, err := exec.CommandContext(t.Context(), helm, tmpl...).CombinedOutput()
			if err != nil {
				t.Fatalf("helm %s: %v\n%s", strings.Join(tmpl, " "), err, out)
			}
			if !bytes.Contains(out, []byte("kind: Deployment")) {
				t.Errorf("helm %s rendered no Deployment:\n%s", strings.Join(tmpl, " "), out)
			}
		})
	}
}

// TestHelmChartAlertsCopy: the chart cannot read outside its directory, so
// it carries a copy of prometheus/alerts.yaml; the copy must be the file,
// byte for byte. Needs no helm, so the short run catches a drift too.
func TestHelmChartAlertsCopy(t *testing.T) {
	src, err := os.ReadFile("prometheus/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cp, err := os.ReadFile(chartDir + "/files/alerts.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, cp) {
		t.Errorf("%s/files/alerts.yaml differs from prometheus/alerts.yaml; after changing the rules run\n  cp deploy/prometheus/alerts.yaml deploy/%s/files/alerts.yaml", chartDir, chartDir)
	}
}
