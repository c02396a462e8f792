// Package jaegertest runs a real Jaeger v2 (module
// github.com/jaegertracing/jaeger v1.76.0, Jaeger v2.13.0) on loopback for
// tests: OTLP gRPC and HTTP receivers, in-memory storage, the query API.
// The binary is built once per machine by .ci/jaeger-build (CI starts it in
// the background at its very start); Binary waits for it.
package jaegertest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/childproc"
	"github.com/walbox/walbox/internal/logbuf"
)

// Version is the Jaeger module version .ci/jaeger-build builds.
const Version = "v1.76.0"

// BinEnv names the Jaeger binary; unset means the path .ci/jaeger-build
// writes (DefaultPath).
const BinEnv = "WALBOX_JAEGER_BIN"

// DefaultPath is where .ci/jaeger-build puts the binary:
// $WALBOX_CACHE_DIR, else $XDG_CACHE_HOME/walbox, else ~/.cache/walbox,
// then jaeger-<Version>/jaeger.
func DefaultPath() string {
	base := os.Getenv("WALBOX_CACHE_DIR")
	if base == "" {
		c := os.Getenv("XDG_CACHE_HOME")
		if c == "" {
			home, _ := os.UserHomeDir()
			c = filepath.Join(home, ".cache")
		}
		base = filepath.Join(c, "walbox")
	}
	return filepath.Join(base, "jaeger-"+Version, "jaeger")
}

// Binary returns the Jaeger binary, waiting up to wait for it to appear
// (a build in the background). It fails the test when there is none then,
// with how to build it.
func Binary(t testing.TB, wait time.Duration) string {
	t.Helper()
	path := os.Getenv(BinEnv)
	if path == "" {
		path = DefaultPath()
	}
	deadline := time.Now().Add(wait)
	for {
		if fi, err := os.Stat(path); err == nil && fi.Mode()&0o111 != 0 {
			return path
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Jaeger binary at %s after %s; build it with: bash .ci/jaeger-build (or set %s)", path, wait, BinEnv)
		}
		time.Sleep(time.Second) // polling for a file, not synchronisation
	}
}

// Jaeger is one running Jaeger.
type Jaeger struct {
	// OTLPGRPC and OTLPHTTP are the receivers' host:port; Query is the
	// query API's base URL.
	OTLPGRPC, OTLPHTTP, Query string

	cmd  *exec.Cmd
	log  *logbuf.Buffer
	done chan struct{}
}

const config = `service:
  extensions: [jaeger_storage, jaeger_query]
  pipelines:
    traces:
      receivers: [otlp]
      processors: [batch]
      exporters: [jaeger_storage_exporter]
  telemetry:
    resource:
      service.name: jaeger
    metrics:
      level: none
    logs:
      level: info
extensions:
  jaeger_query:
    storage:
      traces: mem
    enable_tracing: false
    http:
      endpoint: %s
    grpc:
      endpoint: %s
  jaeger_storage:
    backends:
      mem:
        memory:
          max_traces: 100000
receivers:
  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
processors:
  batch:
    timeout: 100ms
exporters:
  jaeger_storage_exporter:
    trace_storage: mem
`

// Start runs bin on free loopback ports and waits until its query API
// answers; it is killed when the test ends.
func Start(t testing.TB, bin string) *Jaeger {
	t.Helper()
	ports := freePorts(t, 4)
	j := &Jaeger{OTLPGRPC: ports[0], OTLPHTTP: ports[1], Query: "http://" + ports[2], log: &logbuf.Buffer{}, done: make(chan struct{})}
	cfg := filepath.Join(t.TempDir(), "jaeger.yaml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, config, ports[2], ports[3], ports[0], ports[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	j.cmd = exec.Command(bin, "--config", cfg)
	j.cmd.Stdout, j.cmd.Stderr = j.log, j.log
	j.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	child, err := childproc.Start(j.cmd)
	if err != nil {
		t.Fatalf("start jaeger: %v", err)
	}
	go func() { _ = child.Wait(); close(j.done) }()
	t.Cleanup(func() {
		j.Stop()
		if t.Failed() {
			t.Logf("jaeger log:\n%s", j.log.Tail(6000))
		}
	})
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(j.Query + "/api/services")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return j
			}
		}
		select {
		case <-j.done:
			t.Fatalf("jaeger exited at start; log:\n%s", j.log.Tail(6000))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("jaeger's query API at %s did not answer within a minute (%v); log:\n%s", j.Query, err, j.log.Tail(6000))
		}
		time.Sleep(50 * time.Millisecond) // polling for readiness
	}
}

// Stop kills Jaeger and waits for it.
func (j *Jaeger) Stop() {
	select {
	case <-j.done:
	default:
		_ = j.cmd.Process.Kill()
		<-j.done
	}
}

func freePorts(t testing.TB, n int) []string {
	t.Helper()
	var lns []net.Listener
	var out []string
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
		out = append(out, ln.Addr().String())
	}
	for _, ln := range lns {
		ln.Close()
	}
	return out
}

// Span is one span as the query API (/api/traces) returns it.
type Span struct {
	TraceID       string `json:"traceID"`
	SpanID        string `json:"spanID"`
	OperationName string `json:"operationName"`
	References    []struct {
		RefType string `json:"refType"`
		TraceID string `json:"traceID"`
		SpanID  string `json:"spanID"`
	} `json:"references"`
	StartTime int64 `json:"startTime"` // µs since the epoch
	Duration  int64 `json:"duration"`  // µs
	Tags      []struct {
		Key   string `json:"key"`
		Type  string `json:"type"`
		Value any    `json:"value"`
	} `json:"tags"`
	ProcessID string `json:"processID"`
}

// Tag returns the tag's value as text, "" when absent.
func (s Span) Tag(key string) string {
	for _, t := range s.Tags {
		if t.Key == key {
			return fmt.Sprint(t.Value)
		}
	}
	return ""
}

// Parent returns the span id of the CHILD_OF reference, "" when none.
func (s Span) Parent() string {
	for _, r := range s.References {
		if r.RefType == "CHILD_OF" {
			return r.SpanID
		}
	}
	return ""
}

// Trace returns the spans of traceID (32 hex digits); none while Jaeger
// has not stored it.
func (j *Jaeger) Trace(ctx context.Context, traceID string) ([]Span, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, j.Query+"/api/traces/"+traceID, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusNotFound {
		return nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("jaeger GET /api/traces/%s: %s: %s", traceID, resp.Status, strings.TrimSpace(string(body)))
	}
	var out struct {
		Data []struct {
			Spans []Span `json:"spans"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &out); err != nil {
		return nil, fmt.Errorf("jaeger trace %s: %w", traceID, err)
	}
	var spans []Span
	for _, d := range out.Data {
		spans = append(spans, d.Spans...)
	}
	return spans, nil
}
