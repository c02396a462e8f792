package kafkacluster

import (
	"context"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/childproc"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/walboxbin"
)

func TestMain(m *testing.M) {
	code := m.Run()
	walboxbin.Cleanup()
	os.Exit(code)
}

// walboxBinary is ./cmd/walbox, built once per test binary.
func walboxBinary(t *testing.T) string { return walboxbin.Path(t) }

// proc is the walbox process.
type proc struct {
	cmd    *exec.Cmd
	stderr *logbuf.Buffer
	done   chan struct{}
	err    error
}

func startWalbox(t *testing.T, env []string) *proc {
	t.Helper()
	cmd := exec.Command(walboxBinary(t), "run")
	cmd.Env = append(os.Environ(), env...)
	p := &proc{cmd: cmd, stderr: &logbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stderr, cmd.Stdout = p.stderr, p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	child, err := childproc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = child.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("walbox stderr:\n%s", p.stderr.Tail(8000))
		}
		// The whole log, for a run investigated by hand.
		if dir := os.Getenv("WALBOX_TEST_LOG_DIR"); dir != "" {
			name := filepath.Join(dir, strings.ReplaceAll(t.Name(), "/", "_")+".walbox.log")
			if err := os.WriteFile(name, []byte(p.stderr.String()), 0o644); err != nil {
				t.Errorf("keep walbox's log: %v", err)
			}
		}
	})
	return p
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// freeAddr returns a free loopback host:port.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// get fetches path from walbox's metrics server.
func get(ctx context.Context, addr, path string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// writer commits outbox transactions of 1 to maxTxn rows every interval
// and records when each committed.
type writer struct {
	mu        sync.Mutex
	written   []outboxtest.Event
	committed map[string]time.Time
	err       error
	stop      chan struct{}
	done      chan struct{}
}

func startWriter(ctx context.Context, t *testing.T, dsn string, maxTxn int, interval time.Duration) *writer {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	w := &writer{committed: map[string]time.Time{}, stop: make(chan struct{}), done: make(chan struct{})}
	gen := outboxtest.NewGenerator(rand.Uint64(), 200)
	rng := rand.New(rand.NewPCG(rand.Uint64(), 1))
	go func() {
		defer close(w.done)
		defer conn.Close(context.Background())
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
			evs := gen.Batch(1 + rng.IntN(maxTxn))
			if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
				w.mu.Lock()
				w.err = err // Postgres is not faulted here: any error is the test's
				w.mu.Unlock()
				return
			}
			at := time.Now()
			w.mu.Lock()
			w.written = append(w.written, evs...)
			for _, e := range evs {
				w.committed[e.ID] = at
			}
			w.mu.Unlock()
		}
	}()
	t.Cleanup(w.halt)
	return w
}

func (w *writer) halt() {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
}

func (w *writer) snapshot() ([]outboxtest.Event, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.written), w.err
}

// commitTime returns when the event with id committed.
func (w *writer) commitTime(id string) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	at, ok := w.committed[id]
	return at, ok
}

// collector consumes with read_committed isolation in the background.
type collector struct {
	mu  sync.Mutex
	got []outboxtest.Received
	ids map[string]bool
	err error
}

func startCollector(ctx context.Context, t *testing.T, brokers []string, pattern string) *collector {
	t.Helper()
	c := &collector{ids: map[string]bool{}}
	cons, err := outboxtest.NewConsumer(brokers, pattern)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			recs, err := cons.Poll(ctx)
			c.mu.Lock()
			if err != nil && c.err == nil {
				c.err = err // logged at the end; fetches retry on their own
			}
			c.got = append(c.got, recs...)
			for _, r := range recs {
				c.ids[r.Headers["event_id"]] = true
			}
			c.mu.Unlock()
		}
	}()
	t.Cleanup(func() { cancel(); <-done; cons.Close() })
	return c
}

func (c *collector) distinct() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ids)
}

func (c *collector) has(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ids[id]
}

func (c *collector) snapshot() []outboxtest.Received {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got)
}
