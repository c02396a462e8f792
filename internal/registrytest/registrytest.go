package registrytest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/kafkatest"
)

// Environment variables.
const (
	// PomEnv points at the Maven project's pom.xml, overriding the
	// search for e2e/registry/pom.xml.
	PomEnv = "WALBOX_REGISTRY_POM"
	// CacheEnv overrides the cache directory.
	CacheEnv = "WALBOX_REGISTRY_CACHE"
)

// ErrUnavailable means no registry can be started here: no java or mvn,
// or the build failed. Start skips the test then, unless
// WALBOX_REQUIRE_INTEGRATION=1.
var ErrUnavailable = errors.New("registrytest: no schema registry can be started")

var pomRelPath = filepath.Join("e2e", "registry", "pom.xml")

// jvmFlags: a small heap and the C1 compiler only start the registry fast
// on two cores; SerialGC runs no GC threads beside the tests.
var jvmFlags = []string{
	"-Xms64m", "-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
	"-XX:-UsePerfData", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
}

// Registry is a running registry.
type Registry struct {
	// URL is the Confluent-compatible API's base URL,
	// http://127.0.0.1:PORT/apis/ccompat/v7.
	URL string
	// Log is the registry's output file.
	Log string

	proc *process
}

// Start builds (first time only) and starts a registry for t, stopped when
// t ends. It skips t when none can be started, or fails it under
// WALBOX_REQUIRE_INTEGRATION=1.
func Start(t testing.TB) *Registry {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	r, err := start(ctx, t.TempDir())
	if err != nil {
		if errors.Is(err, ErrUnavailable) && os.Getenv(kafkatest.RequireEnv) != "1" {
			t.Skipf("skipping (set %s=1 to fail instead): %v", kafkatest.RequireEnv, err)
		}
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return r
}

// Stop kills the registry (its storage is in memory: nothing to keep).
func (r *Registry) Stop() {
	if r.proc != nil {
		r.proc.kill()
	}
}

// RSS returns the registry process's resident set size in bytes.
func (r *Registry) RSS() (int64, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(r.proc.pid()) + "/status")
	if err != nil {
		return 0, err
	}
	for l := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024, err
		}
	}
	return 0, errors.New("no VmRSS")
}

func start(ctx context.Context, dir string) (*Registry, error) {
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("%w: java is not on PATH (apt-get install openjdk-17-jre-headless): %v", ErrUnavailable, err)
	}
	jar, _, err := Build(ctx)
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "registry.log")
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	args := append(append([]string{}, jvmFlags...),
		"-Dquarkus.http.host=127.0.0.1",
		"-Dquarkus.http.port="+strconv.Itoa(port),
		"-jar", jar)
	p, err := spawn(java, args, dir, out)
	if err != nil {
		return nil, fmt.Errorf("%w: start java: %v", ErrUnavailable, err)
	}
	r := &Registry{URL: "http://127.0.0.1:" + strconv.Itoa(port) + "/apis/ccompat/v7", Log: logPath, proc: p}
	if err := r.waitReady(ctx); err != nil {
		r.Stop()
		return nil, err
	}
	// Confluent's default; Apicurio's is NONE.
	if err := r.put(ctx, "/config", `{"compatibility": "BACKWARD"}`); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

// waitReady polls the subjects list until the registry answers.
func (r *Registry) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, r.URL+"/subjects", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if r.proc.exited() {
			return fmt.Errorf("registrytest: the registry exited before it was ready:\n%s", tailFile(r.Log, 30))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("registrytest: the registry was not ready in 2 minutes:\n%s", tailFile(r.Log, 30))
		}
		time.Sleep(100 * time.Millisecond) // polling interval
	}
}

func (r *Registry) put(ctx context.Context, path, body string) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, r.URL+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("registrytest: PUT %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("registrytest: PUT %s: %s %s", path, resp.Status, b)
	}
	return nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Build returns the registry's runnable jar, building it with mvn into the
// cache when the Maven project changed or was never built; built reports a
// build by this call.
func Build(ctx context.Context) (jar string, built bool, err error) {
	pom, err := kafkatest.FindProjectFile(os.Getenv(PomEnv), PomEnv, pomRelPath)
	if err != nil {
		return "", false, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	project := filepath.Dir(pom)
	hash, err := hashTree(project)
	if err != nil {
		return "", false, fmt.Errorf("registrytest: %w", err)
	}
	cache, err := cacheDir()
	if err != nil {
		return "", false, err
	}
	dest := filepath.Join(cache, "registry-"+hash[:16])
	if jar, ok := runnerJar(dest); ok {
		return jar, false, nil
	}
	// Test binaries of several packages start at once in a full run: one
	// builds, the others wait for it (three builds at once on two cores
	// would take minutes).
	unlock, err := lockFile(dest + ".lock")
	if err != nil {
		return "", false, fmt.Errorf("registrytest: %w", err)
	}
	defer unlock()
	if jar, ok := runnerJar(dest); ok {
		return jar, false, nil
	}
	mvn, err := exec.LookPath("mvn")
	if err != nil {
		return "", false, fmt.Errorf("%w: the registry is not built and mvn is not on PATH (apt-get install maven): %v", ErrUnavailable, err)
	}
	// Build in a private copy, then rename it into place: test binaries
	// of several packages may build at once, and a reader must never see
	// half a build.
	tmp, err := os.MkdirTemp(cache, ".registry-build-")
	if err != nil {
		return "", false, fmt.Errorf("registrytest: %w", err)
	}
	defer os.RemoveAll(tmp)
	if err := os.CopyFS(tmp, os.DirFS(project)); err != nil {
		return "", false, fmt.Errorf("registrytest: copy %s: %w", project, err)
	}
	cmd := exec.CommandContext(ctx, mvn, "-q", "-B", "-Dstyle.color=never", "-DskipTests", "package")
	cmd.Dir = tmp
	var log bytes.Buffer
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := runTool(cmd); err != nil {
		return "", false, fmt.Errorf("%w: mvn package in %s: %v\n--- mvn output ---\n%s", ErrUnavailable, project, err, tail(log.String(), 40))
	}
	if _, ok := runnerJar(tmp); !ok {
		return "", false, fmt.Errorf("%w: mvn package built no runnable jar in %s/target", ErrUnavailable, tmp)
	}
	if err := os.Rename(tmp, dest); err != nil {
		// Another build won the race: use its result.
		if jar, ok := runnerJar(dest); ok {
			return jar, false, nil
		}
		return "", false, fmt.Errorf("registrytest: %w", err)
	}
	jar, _ = runnerJar(dest)
	return jar, true, nil
}

// runnerJar finds the Quarkus runner in dir/target: the legacy-jar layout
// (*-runner.jar beside lib/) that Apicurio's build properties ask for, or
// the fast-jar one (quarkus-app/quarkus-run.jar).
func runnerJar(dir string) (string, bool) {
	if p := filepath.Join(dir, "target", "quarkus-app", "quarkus-run.jar"); fileExists(p) {
		return p, true
	}
	m, _ := filepath.Glob(filepath.Join(dir, "target", "*-runner.jar"))
	if len(m) == 1 && fileExists(filepath.Join(dir, "target", "lib")) {
		return m[0], true
	}
	return "", false
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// hashTree hashes the Maven project's files (not target/).
func hashTree(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if d.IsDir() {
			if rel == "target" {
				return filepath.SkipDir
			}
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", rel, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil)), err
}

func cacheDir() (string, error) {
	dir := os.Getenv(CacheEnv)
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		dir = filepath.Join(base, "walbox")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("registrytest: cache directory: %w", err)
	}
	return dir, nil
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func tailFile(path string, n int) string {
	b, _ := os.ReadFile(path)
	return tail(string(b), n)
}
