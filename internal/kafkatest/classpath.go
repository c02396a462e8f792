package kafkatest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
)

// PomEnv names the environment variable that points at the Maven project
// naming the broker's jars, overriding the search for e2e/kafka/pom.xml.
const PomEnv = "WALBOX_KAFKA_POM"

// CacheEnv names the environment variable that overrides the cache
// directory (Options.CacheDir).
const CacheEnv = "WALBOX_KAFKA_CACHE"

// pomRelPath is where the pom lives relative to the repository root.
var pomRelPath = filepath.Join("e2e", "kafka", "pom.xml")

// findPom returns opts.Pom, $WALBOX_KAFKA_POM, or e2e/kafka/pom.xml in the
// working directory or its nearest parent that has one. `go test` runs each
// package in its own directory, so the search finds the repository's pom
// from any package.
func findPom(opts Options) (string, error) {
	return FindProjectFile(opts.Pom, PomEnv, pomRelPath)
}

// FindProjectFile returns override if set, else the path in the
// environment variable env if set, else relPath under the working
// directory or its nearest parent that has it, as an absolute path. `go
// test` runs each package in its own directory, so the search finds a
// repository file from any package.
func FindProjectFile(override, env, relPath string) (string, error) {
	if override != "" {
		return filepath.Abs(override)
	}
	if p := os.Getenv(env); p != "" {
		return filepath.Abs(p)
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("kafkatest: find %s: %w", relPath, err)
	}
	for {
		p := filepath.Join(dir, relPath)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("kafkatest: no %s in the working directory or its parents (set %s)", relPath, env)
		}
		dir = parent
	}
}

var kafkaVersionRE = regexp.MustCompile(`<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>`)

// pomVersion returns the pom's <kafka.version> property, or "unknown".
func pomVersion(pom []byte) string {
	if m := kafkaVersionRE.FindSubmatch(pom); m != nil {
		return string(m[1])
	}
	return "unknown"
}

// cacheDir returns opts.CacheDir, $WALBOX_KAFKA_CACHE or
// os.UserCacheDir()/walbox (os.TempDir()/walbox without one), creating it.
func cacheDir(opts Options) (string, error) {
	dir := opts.CacheDir
	if dir == "" {
		dir = os.Getenv(CacheEnv)
	}
	if dir == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			// No $HOME (a stripped CI environment): a cache that lasts
			// until reboot beats none.
			base = os.TempDir()
		}
		dir = filepath.Join(base, "walbox")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("kafkatest: cache directory: %w", err)
	}
	return dir, nil
}

// classpath is a resolved broker classpath.
type classpath struct {
	version string   // Kafka version named by the pom
	jars    []string // absolute paths, in Maven's order
	fromMvn bool     // resolved by this call rather than read from the cache
}

func (c classpath) String() string { return strings.Join(c.jars, string(os.PathListSeparator)) }

// cacheHeader starts a classpath cache file; the pom's SHA-256 follows it.
const cacheHeader = "# kafkatest classpath; pom-sha256="

// resolveClasspath returns the broker's runtime classpath. The cache file
// <cacheDir>/kafka-<version>.classpath holds the pom's hash and the
// classpath; it is used when the hash matches and every jar still exists,
// and otherwise rewritten from `mvn dependency:build-classpath`.
func resolveClasspath(ctx context.Context, opts Options, dir string) (classpath, error) {
	pomPath, err := findPom(opts)
	if err != nil {
		return classpath{}, err
	}
	return resolvePom(ctx, opts, pomPath, "kafka", dir)
}

// resolvePom returns the runtime classpath of the Maven project pomPath,
// cached in <dir>/<name>-<version>.classpath (see resolveClasspath).
func resolvePom(ctx context.Context, opts Options, pomPath, name, dir string) (classpath, error) {
	pom, err := os.ReadFile(pomPath)
	if err != nil {
		return classpath{}, fmt.Errorf("kafkatest: read pom: %w", err)
	}
	sum := sha256.Sum256(pom)
	hash := hex.EncodeToString(sum[:])
	cp := classpath{version: pomVersion(pom)}
	cachePath := filepath.Join(dir, name+"-"+cp.version+".classpath")

	if jars, ok := readClasspathCache(cachePath, hash); ok {
		cp.jars = jars
		return cp, nil
	}

	jars, err := runMaven(ctx, opts, pomPath)
	if err != nil {
		return classpath{}, err
	}
	cp.jars = jars
	cp.fromMvn = true
	content := cacheHeader + hash + "\n" + cp.String() + "\n"
	// Test binaries of several packages may resolve at once: write a private
	// file and rename it, so a reader never sees half a classpath.
	tmp, err := os.CreateTemp(dir, ".classpath-*")
	if err != nil {
		return classpath{}, fmt.Errorf("kafkatest: cache classpath: %w", err)
	}
	_, werr := tmp.WriteString(content)
	werr = errors.Join(werr, tmp.Chmod(0o644)) // CreateTemp makes it private
	if err := errors.Join(werr, tmp.Close()); err != nil {
		_ = os.Remove(tmp.Name())
		return classpath{}, fmt.Errorf("kafkatest: cache classpath: %w", err)
	}
	if err := os.Rename(tmp.Name(), cachePath); err != nil {
		_ = os.Remove(tmp.Name())
		return classpath{}, fmt.Errorf("kafkatest: cache classpath: %w", err)
	}
	return cp, nil
}

// readClasspathCache returns the cached classpath if it was resolved from a
// pom with this hash and all its jars are still there (~/.m2 may have been
// cleaned).
func readClasspathCache(path, hash string) ([]string, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, false
	}
	header, rest, ok := strings.Cut(string(b), "\n")
	if !ok || header != cacheHeader+hash {
		return nil, false
	}
	jars := splitClasspath(rest)
	if len(jars) == 0 {
		return nil, false
	}
	for _, j := range jars {
		if _, err := os.Stat(j); err != nil {
			return nil, false
		}
	}
	return jars, true
}

func splitClasspath(s string) []string {
	var jars []string
	for _, j := range strings.Split(strings.TrimSpace(s), string(os.PathListSeparator)) {
		if j != "" {
			jars = append(jars, j)
		}
	}
	return jars
}

// runMaven resolves the pom's runtime classpath with mvn, downloading jars
// into ~/.m2 as needed.
func runMaven(ctx context.Context, opts Options, pomPath string) ([]string, error) {
	mvn := opts.Maven
	if mvn == "" {
		var err error
		if mvn, err = exec.LookPath("mvn"); err != nil {
			return nil, fmt.Errorf("%w: the classpath of %s is not cached and mvn is not on PATH (apt-get install maven): %v", ErrUnavailable, pomPath, err)
		}
	} else if _, err := os.Stat(mvn); err != nil {
		return nil, fmt.Errorf("%w: Options.Maven: %v", ErrUnavailable, err)
	}
	out, err := os.CreateTemp("", "walbox-kafka-classpath-*")
	if err != nil {
		return nil, fmt.Errorf("kafkatest: %w", err)
	}
	outPath := out.Name()
	_ = out.Close()
	defer os.Remove(outPath)

	cmd := exec.CommandContext(ctx, mvn,
		"-q", "-B", "-Dstyle.color=never",
		"-f", pomPath,
		"dependency:build-classpath",
		"-Dmdep.outputFile="+outPath,
		"-Dmdep.includeScope=runtime",
	)
	cmd.Dir = filepath.Dir(pomPath)
	setGroupKill(cmd)
	var log bytes.Buffer
	cmd.Stdout = &log
	cmd.Stderr = &log
	if err := runTool(cmd); err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
		return nil, fmt.Errorf("kafkatest: mvn dependency:build-classpath on %s: %w\n--- mvn output ---\n%s",
			pomPath, err, tail(log.Bytes(), 40))
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: read mvn's classpath: %w", err)
	}
	jars := splitClasspath(string(b))
	if len(jars) == 0 {
		return nil, fmt.Errorf("kafkatest: mvn resolved an empty classpath from %s\n--- mvn output ---\n%s", pomPath, tail(log.Bytes(), 40))
	}
	return jars, nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
