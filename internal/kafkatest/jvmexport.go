package kafkatest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// This file lends kafkatest's JVM plumbing to other test harnesses that run
// a Java program from Maven jars next to the broker (internal/debeziumtest
// runs Kafka Connect): classpath resolution and caching, finding java, the
// startup flags, and a child JVM that cannot outlive the test.

// ResolveClasspath returns the runtime classpath (absolute jar paths, in
// Maven's order) of the Maven project pom and the project's <kafka.version>
// property ("unknown" without one). Like the broker's, the classpath is
// cached in the cache directory (Options.CacheDir, $WALBOX_KAFKA_CACHE, or
// the user cache dir) as <name>-<version>.classpath, keyed by the pom's
// SHA-256, and resolved with `mvn dependency:build-classpath` (Options.Maven)
// when the pom changed or a jar is gone. Errors wrap ErrUnavailable when
// the classpath is not cached and mvn is missing. Only Maven and CacheDir
// of opts are used.
func ResolveClasspath(ctx context.Context, opts Options, pom, name string) (jars []string, version string, err error) {
	pom, err = filepath.Abs(pom)
	if err != nil {
		return nil, "", fmt.Errorf("kafkatest: pom %s: %w", pom, err)
	}
	dir, err := cacheDir(opts)
	if err != nil {
		return nil, "", err
	}
	cp, err := resolvePom(ctx, opts, pom, name, dir)
	if err != nil {
		return nil, "", err
	}
	return cp.jars, cp.version, nil
}

// CacheDir returns the directory ResolveClasspath caches in, creating it.
func CacheDir(opts Options) (string, error) { return cacheDir(opts) }

// FindJava returns opts.Java, $JAVA_HOME/bin/java or java on PATH; its
// error wraps ErrUnavailable.
func FindJava(opts Options) (string, error) { return findJava(opts) }

// JVMDefaults returns a copy of the flags every broker JVM starts with
// (fast startup on a small machine: C1 only, SerialGC, a 512 MiB heap).
// Flags appended after them win.
func JVMDefaults() []string { return append([]string(nil), jvmDefaults...) }

// Supported reports whether this OS can run a child JVM safely (Linux only:
// the parent-death signal keeps it from outliving a crashed test).
func Supported() bool { return supported }

// JVM is a child JVM started by StartJVM. It runs in its own process group
// and the kernel SIGKILLs it if the test process dies. Safe for concurrent
// use.
type JVM struct{ p *proc }

// StartJVM starts java with args in dir, writing its stdout and stderr to
// out (which the caller may close once StartJVM returns).
func StartJVM(java string, args []string, dir string, out *os.File) (*JVM, error) {
	if !supported {
		return nil, fmt.Errorf("%w: a JVM runs only on Linux, where it cannot outlive its test", ErrUnavailable)
	}
	p, err := spawn(java, args, dir, out)
	if err != nil {
		return nil, fmt.Errorf("kafkatest: run %s: %w", java, err)
	}
	return &JVM{p: p}, nil
}

// PID returns the JVM's process id, also its process group id.
func (j *JVM) PID() int { return j.p.pid() }

// Done is closed once the JVM has exited and been reaped.
func (j *JVM) Done() <-chan struct{} { return j.p.done }

// Err returns the JVM's exit error (nil for exit status 0); valid once Done
// is closed.
func (j *JVM) Err() error {
	<-j.p.done
	return j.p.err
}

// Terminate sends SIGTERM to the JVM (its shutdown hooks run) and returns
// at once; wait on Done.
func (j *JVM) Terminate() { j.p.terminate() }

// Kill sends SIGKILL to the JVM's process group and waits until it has been
// reaped.
func (j *JVM) Kill() { j.p.kill() }

// RenderProperties returns p as a Java .properties file, keys sorted and
// backslashes escaped; keys and values must not need other escaping (no
// whitespace, '=' or ':' in keys, no newlines in values).
func RenderProperties(p map[string]string) string { return renderProperties(p) }

// Log4jConfig returns a log4j2 properties configuration that appends
// everything at INFO and above to logPath.
func Log4jConfig(logPath string) string { return log4jConfig(logPath) }

// FreePort asks the kernel for a free loopback port. Another process may
// take it before the caller binds it.
func FreePort() (int, error) { return freePort() }

// FileSize returns the size of the file at path, 0 if it does not exist.
func FileSize(path string) int64 { return fileSize(path) }

// Tail returns the last n lines of b.
func Tail(b []byte, n int) string { return tail(b, n) }
