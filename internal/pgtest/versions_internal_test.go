package pgtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/fulltest"
)

func TestParseVersionOutput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		out     string
		want    int
		wantErr bool
	}{
		{name: "debian", out: "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)\n", want: 15},
		{name: "plain", out: "postgres (PostgreSQL) 18.4\n", want: 18},
		{name: "beta", out: "postgres (PostgreSQL) 19beta1\n", want: 19},
		{name: "garbage", out: "bash: postgres: not found", wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseVersionOutput(tc.out)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("parseVersionOutput(%q) = %d, %v; want %d, error %v", tc.out, got, err, tc.want, tc.wantErr)
			}
		})
	}
}

// fakeBin makes a directory with an initdb and a postgres that only answers
// --version with the given major.
func fakeBin(t *testing.T, dir, major string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho 'postgres (PostgreSQL) " + major + ".1'\n"
	for _, name := range []string{"initdb", "postgres"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// fakeNPM lays out an npm-installed version in npmDir, complete (with its
// marker) or not.
func fakeNPM(t *testing.T, npmDir, major string, complete bool) string {
	t.Helper()
	prefix := filepath.Join(npmDir, "pg"+major)
	bin := fakeBin(t, npmBinDir(prefix), major)
	if complete {
		if err := os.WriteFile(filepath.Join(prefix, npmMarker), []byte("test\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return bin
}

func TestInstalledVersionsSourcesAndPreference(t *testing.T) {
	if _, ok := npmPlatform(); !ok {
		t.Skip("no npm packages for this platform")
	}
	npmDir := t.TempDir()
	t.Setenv(NPMDirEnv, npmDir)
	pgBin := fakeBin(t, filepath.Join(t.TempDir(), "bin"), "97")
	t.Setenv("PG_BIN", pgBin)
	fakeNPM(t, npmDir, "97", true) // shadowed by PG_BIN
	npm96 := fakeNPM(t, npmDir, "96", true)
	fakeNPM(t, npmDir, "98", false) // no marker: an interrupted install
	if err := os.MkdirAll(filepath.Join(npmDir, ".tmp-pg99-123"), 0o755); err != nil {
		t.Fatal(err)
	}

	got, err := InstalledVersions()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.IsSortedFunc(got, func(a, b Version) int { return a.Major - b.Major }) {
		t.Errorf("not sorted by major: %v", got)
	}
	for i := 1; i < len(got); i++ {
		if got[i].Major == got[i-1].Major {
			t.Errorf("major %d listed twice: %v", got[i].Major, got)
		}
	}
	find := func(major int) (Version, bool) {
		i := slices.IndexFunc(got, func(v Version) bool { return v.Major == major })
		if i < 0 {
			return Version{}, false
		}
		return got[i], true
	}
	if v, _ := find(97); v != (Version{Major: 97, BinDir: pgBin, Source: SourcePGBin}) {
		t.Errorf("97 = %+v, want PG_BIN's, preferred over npm's", v)
	}
	if v, _ := find(96); v != (Version{Major: 96, BinDir: npm96, Source: SourceNPM}) {
		t.Errorf("96 = %+v, want the npm one in %s", v, npm96)
	}
	for _, major := range []int{98, 99} {
		if v, ok := find(major); ok {
			t.Errorf("incomplete install listed: %+v", v)
		}
	}

	t.Run("select", func(t *testing.T) {
		for _, tc := range []struct {
			spec    string
			full    string // WALBOX_TEST_FULL
			wantAll bool   // every installed version
			want    []int
			wantErr []string // all in the message
		}{
			{spec: "97, 96,97", want: []int{96, 97}},
			{spec: "", full: "1", wantAll: true},
			// The short run tests the default version only: before, a
			// laptop with every version installed ran each test five times.
			{spec: "", full: "", want: []int{97}},
			{spec: "95", wantErr: []string{"PostgreSQL 95 not installed", "go run ./internal/pgtest/cmd/pginstall"}},
			{spec: "14,x", wantErr: []string{"comma-separated"}},
		} {
			t.Setenv(fulltest.Env, tc.full)
			vs, err := selectVersions(tc.spec)
			if tc.wantErr != nil {
				for _, want := range tc.wantErr {
					if err == nil || !strings.Contains(err.Error(), want) {
						t.Errorf("selectVersions(%q) error = %v, want one containing %q", tc.spec, err, want)
					}
				}
				continue
			}
			if err != nil {
				t.Errorf("selectVersions(%q): %v", tc.spec, err)
				continue
			}
			var majors []int
			for _, v := range vs {
				majors = append(majors, v.Major)
			}
			want := tc.want
			if tc.wantAll {
				want = nil
				for _, v := range got {
					want = append(want, v.Major)
				}
			}
			if !slices.Equal(majors, want) {
				t.Errorf("selectVersions(%q) with %s=%q = %v, want %v", tc.spec, fulltest.Env, tc.full, majors, want)
			}
		}
	})

	t.Run("broken PG_BIN fails", func(t *testing.T) {
		t.Setenv("PG_BIN", t.TempDir())
		if _, err := InstalledVersions(); err == nil {
			t.Fatal("InstalledVersions with an empty PG_BIN succeeded")
		}
	})
}

func TestHydrateSymlinks(t *testing.T) {
	pkg := t.TempDir()
	lib := filepath.Join(pkg, "native", "lib")
	if err := os.MkdirAll(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(lib, "libx.so.1.2"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeLinks := func(json string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(pkg, "native", "pg-symlinks.json"), []byte(json), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeLinks(`[{"source":"native/lib/libx.so.1.2","target":"native/lib/libx.so.1"}]`)
	for range 2 { // the second run finds the link and keeps it
		if err := hydrateSymlinks(pkg); err != nil {
			t.Fatal(err)
		}
		if dest, err := os.Readlink(filepath.Join(lib, "libx.so.1")); err != nil || dest != "libx.so.1.2" {
			t.Fatalf("libx.so.1 -> %q, %v; want a relative link to libx.so.1.2", dest, err)
		}
	}

	writeLinks(`[{"source":"/etc/passwd","target":"native/lib/evil"}]`)
	if err := hydrateSymlinks(pkg); err == nil {
		t.Error("a link to an absolute path outside the package was accepted")
	}
	writeLinks(`[{"source":"native/lib/libx.so.1.2","target":"../../evil"}]`)
	if err := hydrateSymlinks(pkg); err == nil {
		t.Error("a link placed outside the package was accepted")
	}
}

func TestMakeReadable(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "d")
	for _, step := range []error{
		os.Mkdir(dir, 0o700),
		os.WriteFile(filepath.Join(dir, "data"), nil, 0o600),
		os.WriteFile(filepath.Join(dir, "exe"), nil, 0o700),
		os.Chmod(dir, 0o700), // Mkdir's mode is subject to the umask
	} {
		if step != nil {
			t.Fatal(step)
		}
	}
	if err := makeReadable(root); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{dir: 0o755, filepath.Join(dir, "data"): 0o644, filepath.Join(dir, "exe"): 0o755} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != want {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode().Perm(), want)
		}
	}
}

func TestReplaceDir(t *testing.T) {
	base := t.TempDir()
	mk := func(name, content string) string {
		t.Helper()
		dir := filepath.Join(base, name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "v"), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	content := func(dir string) string {
		b, _ := os.ReadFile(filepath.Join(dir, "v"))
		return string(b)
	}
	final := mk("pg16", "old")

	// Someone else installed the same version meanwhile: keep theirs.
	tmp := mk(".tmp-a", "new")
	if err := replaceDir(tmp, final, func() bool { return true }); err != nil {
		t.Fatal(err)
	}
	if content(final) != "old" {
		t.Errorf("replaceDir replaced a directory that was already done")
	}

	// An outdated version is replaced and nothing is left beside it.
	if err := replaceDir(tmp, final, func() bool { return false }); err != nil {
		t.Fatal(err)
	}
	if content(final) != "new" {
		t.Errorf("replaceDir left the outdated directory")
	}
	entries, _ := os.ReadDir(base)
	if len(entries) != 1 {
		t.Errorf("leftovers beside the installed directory: %v", entries)
	}
}
