package e2e

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/outboxtest"
)

// The runbooks of docs/operating.md (after a failover on PostgreSQL 14–16)
// and docs/slots.md (a vanished slot) start from the commit time of the
// newest event received minus a margin. The tests run them while walbox
// lags: its replication connection goes through a proxy that delays every
// byte by runbookLag, so each event reaches Kafka that long after its
// commit, and the stream still in the proxy when the old slot is lost is
// lost with it (as a backlog on a crashed primary is). With the Kafka
// timestamp walbox used to leave to the producer (the produce time) and a
// margin covering only the longest transaction, as the runbooks said, they
// skipped the rows committed in the last runbookLag before the loss.
const runbookLag = 3 * time.Second

// Placeholders of the runbooks' command blocks.
const (
	placeholderNewest = "<commit time of the newest event received>"
	placeholderMargin = "<margin>"
)

// runbookWriterLongestTxn bounds the writer's transactions (one INSERT of
// at most 10 rows each): the "longest transaction" part of the margin.
const runbookWriterLongestTxn = time.Second

// docBlock returns the first fenced block of kind (sh, sql) in the section
// of doc (a path from e2e/) that starts with heading.
func docBlock(t *testing.T, doc, heading, kind string) string {
	t.Helper()
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	i := strings.Index(s, heading)
	if i < 0 {
		t.Fatalf("%s has no section %q", doc, heading)
	}
	m := regexp.MustCompile("(?s)```" + kind + "\n(.*?)```").FindStringSubmatch(s[i:])
	if m == nil {
		t.Fatalf("the section %q of %s has no %s block", heading, doc, kind)
	}
	return m[1]
}

// fillRunbook replaces the runbooks' placeholders: the newest record
// timestamp received and the margin.
func fillRunbook(s string, newest time.Time, margin time.Duration) string {
	s = strings.ReplaceAll(s, placeholderNewest, newest.UTC().Format(time.RFC3339Nano))
	return strings.ReplaceAll(s, placeholderMargin, fmt.Sprintf("%d milliseconds", margin.Milliseconds()))
}

// newestTimestamp is the largest record timestamp received: what the
// runbooks call the commit time of the newest event received.
func newestTimestamp(got []outboxtest.Received) time.Time {
	var last time.Time
	for _, r := range got {
		if r.Timestamp.After(last) {
			last = r.Timestamp
		}
	}
	return last
}

// startLag puts a latency proxy in front of target (walbox's Postgres
// endpoint); its delay is set by lagging.
func startLag(t *testing.T, target string) *faultproxy.Proxy {
	t.Helper()
	return faultproxy.New(t, target)
}

// lagging delays walbox's replication stream by runbookLag and waits until
// walbox's own metrics show it: 20 more transactions acknowledged more than
// half the lag after their commit than before (the backlog of walbox's
// start may have some).
func lagging(ctx context.Context, t *testing.T, lag *faultproxy.Proxy, metricsAddr string) {
	t.Helper()
	late := func() float64 {
		h, err := scrapeHistogram(ctx, metricsAddr, "walbox_commit_to_ack_seconds")
		if err != nil {
			return -1
		}
		return h.count - h.atMost(runbookLag.Seconds()/2)
	}
	var before float64
	waitUntil(ctx, t, time.Minute, "walbox's metrics", func() bool { before = late(); return before >= 0 })
	lag.SetLatency(runbookLag)
	waitUntil(ctx, t, 2*time.Minute, "walbox to lag", func() bool { return late() >= before+20 })
}

// runbookMargin is the margin the runbooks ask for, read as an operator
// would: walbox's lag from walbox_commit_to_ack_seconds (the upper bound of
// the highest bucket it filled) plus the longest transaction.
func runbookMargin(ctx context.Context, t *testing.T, metricsAddr string) time.Duration {
	t.Helper()
	h, err := scrapeHistogram(ctx, metricsAddr, "walbox_commit_to_ack_seconds")
	if err != nil {
		t.Fatal(err)
	}
	lag := h.bound()
	if math.IsInf(lag, 1) {
		t.Fatalf("walbox_commit_to_ack_seconds has observations past its largest bucket: %+v", h)
	}
	return time.Duration(lag*float64(time.Second)) + runbookWriterLongestTxn
}

// histogram is one Prometheus histogram as /metrics serves it.
type histogram struct {
	buckets map[float64]float64 // le -> cumulative count
	count   float64
}

// atMost is the number of observations at most le (a bucket bound).
func (h histogram) atMost(le float64) float64 {
	best, n := math.Inf(-1), 0.0
	for b, c := range h.buckets {
		if b <= le && b > best {
			best, n = b, c
		}
	}
	return n
}

// bound is the smallest bucket bound that holds every observation.
func (h histogram) bound() float64 {
	best := math.Inf(1)
	for b, c := range h.buckets {
		if c >= h.count && b < best {
			best = b
		}
	}
	return best
}

func scrapeHistogram(ctx context.Context, addr, name string) (histogram, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	if err != nil {
		return histogram{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return histogram{}, err
	}
	defer resp.Body.Close()
	h := histogram{buckets: map[float64]float64{}}
	bucket := regexp.MustCompile(`^` + name + `_bucket\{le="([^"]+)"\} (\S+)$`)
	sc := bufio.NewScanner(io.LimitReader(resp.Body, 4<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	found := false
	for sc.Scan() {
		line := sc.Text()
		if m := bucket.FindStringSubmatch(line); m != nil {
			le, err1 := strconv.ParseFloat(m[1], 64)
			n, err2 := strconv.ParseFloat(m[2], 64)
			if err1 != nil || err2 != nil {
				return histogram{}, fmt.Errorf("%s: cannot read %q", name, line)
			}
			h.buckets[le] = n
		} else if rest, ok := strings.CutPrefix(line, name+"_count "); ok {
			n, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				return histogram{}, fmt.Errorf("%s: cannot read %q", name, line)
			}
			h.count, found = n, true
		}
	}
	if err := sc.Err(); err != nil {
		return histogram{}, err
	}
	if !found {
		return histogram{}, fmt.Errorf("/metrics has no %s", name)
	}
	return h, nil
}
