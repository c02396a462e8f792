package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/walbox/walbox/internal/fulltest"
)

func TestResolve(t *testing.T) {
	vcs := []debug.BuildSetting{
		{Key: "-trimpath", Value: "true"},
		{Key: "vcs.revision", Value: "0123456789abcdef0123456789abcdef01234567"},
		{Key: "vcs.modified", Value: "true"},
	}
	tests := []struct {
		name     string
		bi       *debug.BuildInfo
		ldV, ldR string
		ldM      string
		want     Info
	}{
		{
			name: "go install of a release: the module version, no vcs settings",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Path: "github.com/walbox/walbox", Version: "v1.2.3"}},
			want: Info{Version: "v1.2.3", Revision: Unknown, Modified: Unknown, GoVersion: "go1.26.8"},
		},
		{
			name: "go build in a modified checkout: devel, with the revision",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			want: Info{Version: "devel", Revision: "0123456789abcdef0123456789abcdef01234567", Modified: "true", GoVersion: "go1.26.8"},
		},
		{
			name: "image build: the linker's values win over the build info",
			bi:   &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}, Settings: vcs},
			ldV:  "v1.3.0", ldR: "fedcba", ldM: "false",
			want: Info{Version: "v1.3.0", Revision: "fedcba", Modified: "false", GoVersion: "go1.26.8"},
		},
		{
			name: "no build info at all",
			want: Info{Version: "devel", Revision: Unknown, Modified: Unknown, GoVersion: Get().GoVersion},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := resolve(tt.bi, tt.ldV, tt.ldR, tt.ldM); got != tt.want {
				t.Errorf("resolve = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestString(t *testing.T) {
	got := Info{Version: "v1.2.3", Revision: "abc", Modified: "false", GoVersion: "go1.26.8"}.String()
	if want := "v1.2.3 (revision abc, modified false, go1.26.8)"; got != want {
		t.Errorf("String = %q, want %q", got, want)
	}
}

func TestRegister(t *testing.T) {
	reg := prometheus.NewRegistry()
	if err := Register(reg, Info{Version: "v1.2.3", Revision: "abc", Modified: "false", GoVersion: "go1.26.8"}); err != nil {
		t.Fatal(err)
	}
	want := `# HELP walbox_build_info Always 1; the labels say which build of walbox runs: version, VCS revision, whether the tree was modified, Go version.
# TYPE walbox_build_info gauge
walbox_build_info{goversion="go1.26.8",modified="false",revision="abc",version="v1.2.3"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "walbox_build_info"); err != nil {
		t.Error(err)
	}
	if problems, err := testutil.GatherAndLint(reg); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %v", problems, err)
	}
}

// TestLinkerFlags builds slotctl with -X the way deploy/image/build.sh
// does and checks that --version prints the values: a renamed variable would
// silently leave the image saying "devel".
//
// The short run builds with the test binaries' own configuration, so every
// package but slotctl's main comes from the build cache and only the link
// is new; the image's -trimpath and CGO_ENABLED=0 change the build of every
// package, the standard library's too (about 90 CPU seconds with an empty
// cache), and neither changes what -X sets. The full run builds with them,
// as build.sh does (and e2e's TestImage checks --version from the image).
func TestLinkerFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	bin := filepath.Join(t.TempDir(), "slotctl")
	const p = "github.com/walbox/walbox/internal/version."
	args := []string{"build", "-buildvcs=false",
		"-ldflags", "-X " + p + "version=v9.8.7 -X " + p + "revision=cafe -X " + p + "modified=false",
		"-o", bin, "../../cmd/slotctl"}
	cmd := exec.Command("go", args...)
	if fulltest.Enabled() {
		cmd = exec.Command("go", slices.Insert(args, 1, "-trimpath")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, out)
	}
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(out), "slotctl v9.8.7 (revision cafe, modified false, go") {
		t.Errorf("slotctl --version = %q", out)
	}
}
