//go:build linux

package kafkatest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/fulltest"
)

// rec is where one produced record landed.
type rec struct {
	offset int64
	seq    int // the record's value: its position in produce order
}

// TestBrokerRoundTripKillRestart is the harness's own acceptance test: a
// real broker takes 1000 idempotent acks=all records, serves them back to a
// read_committed consumer in order per partition, survives a SIGKILL with
// its data, and serves reads and writes again after Restart.
func TestBrokerRoundTripKillRestart(t *testing.T) {
	fulltest.Require(t, "the harness broker killed and restarted")
	startedAt := time.Now()
	b := Start(t, WithPartitions(2))
	t.Logf("broker %s (Kafka %s) ready in %v", b.Addr(), b.Version(), time.Since(startedAt).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	topic := uniqueTopic("roundtrip")
	adm := newAdmin(t, b)
	resp, err := adm.CreateTopic(ctx, 3, 1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		t.Fatalf("create topic %s: %v", topic, err)
	}

	want := produce(ctx, t, b, topic, 0, 1000)
	if len(want) != 3 {
		t.Errorf("records landed in %d partitions, want all 3: %v", len(want), partitionSizes(want))
	}
	consumeAndCheck(ctx, t, b, topic, want)

	b.RequireFaults(t)
	pid := b.proc.pid()
	if err := b.Kill(); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Fatalf("JVM %d still exists after Kill (kill -0: %v)", pid, err)
	}
	if c, err := net.DialTimeout("tcp", b.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("%s still accepts connections after Kill", b.Addr())
	}
	if err := b.Kill(); !errors.Is(err, ErrNotRunning) {
		t.Errorf("second Kill = %v, want ErrNotRunning", err)
	}

	restartedAt := time.Now()
	if err := b.Restart(ctx); err != nil {
		t.Fatalf("Restart after Kill: %v", err)
	}
	t.Logf("restart after SIGKILL (log recovery) ready in %v", time.Since(restartedAt).Round(time.Millisecond))
	consumeAndCheck(ctx, t, b, topic, want) // the data survived

	more := produce(ctx, t, b, topic, 1000, 200) // and the broker takes writes again
	for p, rs := range more {
		want[p] = append(want[p], rs...)
	}
	consumeAndCheck(ctx, t, b, topic, want)

	// Auto-creation is on by default and uses Options.Partitions.
	auto := uniqueTopic("auto")
	produce(ctx, t, b, auto, 0, 1)
	td, err := adm.ListTopics(ctx, auto)
	if err != nil {
		t.Fatalf("list topics: %v", err)
	}
	if got := len(td[auto].Partitions); got != 2 {
		t.Errorf("auto-created %s has %d partitions, want 2 (num.partitions)", auto, got)
	}

	// Close stops the JVM for good and removes everything; the cleanup's
	// second Close is a no-op.
	pid = b.proc.pid()
	closedAt := time.Now()
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	t.Logf("graceful Close took %v", time.Since(closedAt).Round(time.Millisecond))
	if !processGone(pid) {
		t.Errorf("JVM %d still exists after Close", pid)
	}
	if _, err := os.Stat(b.dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temp dir %s still exists after Close (stat: %v)", b.dir, err)
	}
	if err := b.Restart(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Restart after Close = %v, want ErrClosed", err)
	}
}

// TestStartFailureReportsLog checks that a broker that cannot start leaves
// nothing behind and explains itself: the error carries the log lines that
// name the bad setting.
func TestStartFailureReportsLog(t *testing.T) {
	if os.Getenv(BrokersEnv) != "" {
		SkipExternal(t, "this test starts a broker with a bad setting")
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	b, err := StartBroker(ctx, Options{ExtraProperties: map[string]string{"num.io.threads": "lots"}})
	if err == nil {
		b.Close()
		t.Fatal("StartBroker with num.io.threads=lots succeeded")
	}
	if errors.Is(err, ErrUnavailable) {
		skipOrFatal(t, err)
	}
	var se *StartError
	if !errors.As(err, &se) {
		t.Fatalf("error %T is not a *StartError: %v", err, err)
	}
	if !strings.Contains(se.LogTail, "num.io.threads") {
		t.Errorf("log tail does not name the bad property:\n%v", err)
	}
}

// TestRestartOnTakenPort covers a JVM that dies during startup: after a
// graceful Stop another process takes the broker's port, so Restart must
// fail with the bind error from the broker log, and succeed once the port
// is free again.
func TestRestartOnTakenPort(t *testing.T) {
	fulltest.Require(t, "broker restart when its port was taken")
	b := Start(t)
	b.RequireFaults(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	if err := b.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := b.Stop(ctx); err != nil {
		t.Errorf("Stop of a stopped broker: %v", err)
	}
	l, err := net.Listen("tcp4", b.Addr())
	if err != nil {
		t.Fatalf("take the broker's port: %v", err)
	}
	err = b.Restart(ctx)
	l.Close()
	var se *StartError
	if !errors.As(err, &se) || se.Op != "restart" {
		t.Fatalf("Restart on a taken port = %v, want a *StartError for restart", err)
	}
	if !errors.Is(err, errPortInUse) || !strings.Contains(se.LogTail, "Address already in use") {
		t.Errorf("error does not report the bind failure:\n%v", err)
	}

	if err := b.Restart(ctx); err != nil {
		t.Fatalf("Restart on a free port: %v", err)
	}
	produce(ctx, t, b, uniqueTopic("after-restart"), 0, 10)
}

// childEnv marks the re-executed test binary of TestJVMDiesWithParent.
const childEnv = "KAFKATEST_CHILD"

// TestJVMDiesWithParent kills a process that started a broker and checks the
// JVM dies with it (the parent-death signal), as it must when `go test`
// times out or is killed.
func TestJVMDiesWithParent(t *testing.T) {
	fulltest.Require(t, "the harness JVM dies with its parent")
	if os.Getenv(childEnv) == "1" {
		runChild()
		return
	}
	if os.Getenv(BrokersEnv) != "" {
		SkipExternal(t, "this test starts a broker of its own and kills its parent")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestJVMDiesWithParent$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()

	var pid int
	var dir string
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, "KAFKATEST_CHILD "); ok {
			if _, err := fmt.Sscanf(rest, "pid=%d dir=%s", &pid, &dir); err != nil {
				t.Fatalf("bad child line %q: %v", line, err)
			}
			break
		}
		if rest, ok := strings.CutPrefix(line, "KAFKATEST_CHILD_SKIP "); ok {
			if os.Getenv(RequireEnv) == "1" {
				t.Fatal(rest)
			}
			t.Skip(rest)
		}
	}
	if pid == 0 {
		t.Fatalf("child exited without starting a broker (scan: %v)", sc.Err())
	}
	defer os.RemoveAll(dir) // the child cannot Close: that is the point

	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	deadline := time.Now().Add(30 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Fatalf("JVM %d outlived its parent by 30 s", pid)
		}
		time.Sleep(20 * time.Millisecond) // polling a process we cannot wait for
	}
}

// runChild starts a broker, reports its JVM and directory, and waits to be
// killed.
func runChild() {
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	b, err := StartBroker(ctx, Options{})
	if errors.Is(err, ErrUnavailable) {
		fmt.Printf("KAFKATEST_CHILD_SKIP %v\n", strings.ReplaceAll(err.Error(), "\n", " "))
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Printf("KAFKATEST_CHILD pid=%d dir=%s\n", b.proc.pid(), b.dir)
	select {}
}

// processGone reports whether pid no longer runs. A zombie counts as gone:
// once its parent is dead nobody may reap it promptly.
func processGone(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return true
	}
	stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may contain spaces, the state follows the last ')'.
	i := strings.LastIndexByte(string(stat), ')')
	return i >= 0 && i+2 < len(stat) && stat[i+2] == 'Z'
}

func uniqueTopic(name string) string {
	return fmt.Sprintf("kafkatest-%s-%d", name, time.Now().UnixNano())
}

func newAdmin(t *testing.T, b *Broker) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// produce sends n records with values first..first+n-1, keyed so they spread
// over the partitions, with an idempotent acks=all producer (franz-go's
// default), and returns where each landed, per partition in offset order.
func produce(ctx context.Context, t *testing.T, b *Broker, topic string, first, n int) map[int32][]rec {
	t.Helper()
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addrs()...),
		kgo.DefaultProduceTopic(topic),
		kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.AllowAutoTopicCreation(),
		// An auto-created topic often has no leader in the first Metadata
		// answer; kgo then waits MetadataMinAge (5 s by default) before
		// asking again.
		kgo.MetadataMinAge(100*time.Millisecond),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	var mu sync.Mutex
	got := map[int32][]rec{}
	var errs []error
	for seq := first; seq < first+n; seq++ {
		r := &kgo.Record{Key: []byte("key-" + strconv.Itoa(seq%37)), Value: []byte(strconv.Itoa(seq))}
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			got[r.Partition] = append(got[r.Partition], rec{offset: r.Offset, seq: seq})
		})
	}
	if err := cl.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("produce to %s: %d of %d records failed: %v", topic, len(errs), n, err)
	}
	for p, rs := range got {
		slices.SortFunc(rs, func(a, b rec) int { return int(a.offset - b.offset) })
		// The idempotent producer keeps produce order within a partition.
		for i := 1; i < len(rs); i++ {
			if rs[i].seq < rs[i-1].seq {
				t.Fatalf("partition %d: record %d at offset %d after record %d at offset %d",
					p, rs[i].seq, rs[i].offset, rs[i-1].seq, rs[i-1].offset)
			}
		}
	}
	return got
}

// consumeAndCheck reads topic from the start with read_committed isolation
// until it has as many records as want holds, and checks it got exactly
// want: every record, at the offset the producer was told, in order.
func consumeAndCheck(ctx context.Context, t *testing.T, b *Broker, topic string, want map[int32][]rec) {
	t.Helper()
	total := 0
	for _, rs := range want {
		total += len(rs)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.Addrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
	)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	got := map[int32][]rec{}
	n := 0
	for n < total {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before %v: %v", n, total, ctx.Err(), partitionSizes(got))
		}
		fs.EachError(func(topic string, p int32, err error) {
			t.Errorf("fetch %s/%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			seq, err := strconv.Atoi(string(r.Value))
			if err != nil {
				t.Fatalf("partition %d offset %d: value %q is not a sequence number", r.Partition, r.Offset, r.Value)
			}
			got[r.Partition] = append(got[r.Partition], rec{offset: r.Offset, seq: seq})
			n++
		})
	}
	for p, rs := range want {
		if !slices.Equal(got[p], rs) {
			t.Errorf("partition %d: consumed %d records, want %d; first difference at %d",
				p, len(got[p]), len(rs), firstDiff(got[p], rs))
		}
	}
	if n != total {
		t.Errorf("consumed %d records, want %d", n, total)
	}
}

func firstDiff(a, b []rec) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func partitionSizes(m map[int32][]rec) map[int32]int {
	out := map[int32]int{}
	for p, rs := range m {
		out[p] = len(rs)
	}
	return out
}
