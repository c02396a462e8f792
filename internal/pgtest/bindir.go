package pgtest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
)

// ErrUnavailable is wrapped by the errors of FindBinDir and StartServer when
// this machine cannot run a test server at all: no PostgreSQL binaries, or a
// root process without a `postgres` account to run them as. Start turns it
// into a skip (or a failure when WALBOX_REQUIRE_INTEGRATION=1).
var ErrUnavailable = errors.New("pgtest: PostgreSQL test server unavailable")

// debianRoot is where Debian and Ubuntu install one directory per major
// version: /usr/lib/postgresql/15/bin.
const debianRoot = "/usr/lib/postgresql"

// FindBinDir returns the directory holding initdb, pg_ctl and postgres. It
// tries, in order: the PG_BIN environment variable, the directory of `initdb`
// on PATH (symlinks resolved, so /usr/local/bin/initdb -> .../15/bin works),
// and the highest-numbered /usr/lib/postgresql/*/bin. The error wraps
// ErrUnavailable when none of them holds the binaries.
func FindBinDir() (string, error) {
	if dir := os.Getenv("PG_BIN"); dir != "" {
		if err := checkBinDir(dir); err != nil {
			return "", fmt.Errorf("PG_BIN=%s: %w", dir, err)
		}
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dir := filepath.Dir(p)
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	entries, _ := os.ReadDir(debianRoot)
	var majors []int
	for _, e := range entries {
		if n, err := strconv.Atoi(e.Name()); err == nil {
			majors = append(majors, n)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(majors)))
	for _, m := range majors {
		dir := filepath.Join(debianRoot, strconv.Itoa(m), "bin")
		if checkBinDir(dir) == nil {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: no initdb/postgres found (set PG_BIN, put initdb on PATH, or apt-get install postgresql)", ErrUnavailable)
}

// checkBinDir reports whether dir holds the executables pgtest runs.
func checkBinDir(dir string) error {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			return fmt.Errorf("%w: %v", ErrUnavailable, err)
		}
		if fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: %s is not executable", ErrUnavailable, filepath.Join(dir, name))
		}
	}
	return nil
}
