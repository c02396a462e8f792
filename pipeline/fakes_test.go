package pipeline

import (
	"context"
	"encoding/binary"
	"log/slog"
	"sync"
	"testing"

	"github.com/jackc/pglogrepl"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/router"
)

// fakeProducer records what the loop produces. With outcome set it settles
// every record at once, from another goroutine as franz-go does; otherwise
// the test settles records itself with ack or refuse.
type fakeProducer struct {
	outcome func(*kgo.Record) error

	mu       sync.Mutex
	recs     []*kgo.Record
	promises []func(*kgo.Record, error)
	settled  []bool
	wg       sync.WaitGroup
}

var _ Producer = (*fakeProducer)(nil)

func (p *fakeProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	p.recs = append(p.recs, r)
	p.promises = append(p.promises, promise)
	p.settled = append(p.settled, p.outcome != nil)
	p.mu.Unlock()
	if p.outcome != nil {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			promise(r, p.outcome(r))
		}()
	}
}

// Flush waits for the records settled by outcome; records the test settles
// by hand are its business.
func (p *fakeProducer) Flush(context.Context) error {
	p.wg.Wait()
	return nil
}

// settle settles record i with err (nil: acknowledged).
func (p *fakeProducer) settle(t *testing.T, i int, err error) {
	t.Helper()
	p.mu.Lock()
	if i >= len(p.recs) || p.settled[i] {
		p.mu.Unlock()
		t.Fatalf("record %d: not produced or already settled", i)
	}
	p.settled[i] = true
	r, promise := p.recs[i], p.promises[i]
	p.mu.Unlock()
	promise(r, err)
}

func (p *fakeProducer) records() []*kgo.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]*kgo.Record(nil), p.recs...)
}

func (p *fakeProducer) topics() []string {
	var out []string
	for _, r := range p.records() {
		out = append(out, r.Topic)
	}
	return out
}

// fakeLimits is a TopicLimits with fixed answers that counts lookups.
type fakeLimits struct {
	mu     sync.Mutex
	limits map[string]int
	err    error
	calls  map[string]int
	// hang, when set, makes a lookup wait until it is closed or the
	// lookup's context ends (a broker that does not answer); hung counts
	// the lookups that ended waiting.
	hang chan struct{}
	hung int
	// hungErr is why the last hung lookup ended (nil: released).
	hungErr error
}

func (f *fakeLimits) MaxMessageBytes(ctx context.Context, topic string) (int, error) {
	f.mu.Lock()
	if f.calls == nil {
		f.calls = map[string]int{}
	}
	f.calls[topic]++
	hang := f.hang
	f.mu.Unlock()
	if hang != nil {
		select {
		case <-hang:
		case <-ctx.Done():
		}
		f.mu.Lock()
		f.hung++
		f.hungErr = ctx.Err()
		f.mu.Unlock()
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return 0, f.err
	}
	return f.limits[topic], nil
}

func (f *fakeLimits) hungLookups() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.hung
}

// testLoop is a relay and a session loop without a connection: the
// replication side is fed with pgoutput bytes through handleWAL, the Kafka
// side is the fake producer.
type testLoop struct {
	*loop
	relay *Relay
	p     *fakeProducer
	reg   *prometheus.Registry
	log   *logbuf.Buffer
}

func newTestLoop(t *testing.T, cfg Config, p *fakeProducer) *testLoop {
	t.Helper()
	cfg.ConnString, cfg.Slot, cfg.Publication = "postgres://127.0.0.1:1/none", "walbox", "walbox"
	if cfg.DedupWindow == 0 {
		cfg.DedupWindow = 100
	}
	rt, err := router.New(router.Config{DeadLetterTopic: cfg.DeadLetterTopic, InvalidRows: invalidRows(cfg)})
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	lb := &logbuf.Buffer{}
	r, err := New(cfg, p, rt, reg, slog.New(slog.NewTextHandler(lb, nil)))
	if err != nil {
		t.Fatal(err)
	}
	r.tracker = checkpoint.New(1)
	tl := &testLoop{relay: r, p: p, reg: reg, log: lb}
	tl.loop = tl.newSession()
	t.Cleanup(r.limits.wait) // as Relay.Run does
	return tl
}

func invalidRows(cfg Config) router.Policy {
	if cfg.DeadLetterTopic != "" {
		return router.PolicyDeadLetter
	}
	return router.PolicyFail
}

// newSession starts a loop as session does after a (re)connect.
func (tl *testLoop) newSession() *loop {
	r := tl.relay
	r.dec.Reset()
	r.tracker.Rewind()
	l := newLoop(r, nil, context.Background(), r.cfg.ReceiveTimeout, 0)
	return l
}

// reconnect ends the session as Run does between sessions and starts the
// next one.
func (tl *testLoop) reconnect(t *testing.T) {
	t.Helper()
	r := tl.relay
	r.lastCommit = max(r.lastCommit, tl.lastCommit)
	if err := tl.p.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	r.dedup.prepareReplay(r.reroute.take())
	tl.loop = tl.newSession()
}

// wal feeds one pgoutput message to the loop.
func (tl *testLoop) wal(t *testing.T, data []byte) {
	t.Helper()
	if err := tl.handleWAL(0, data); err != nil {
		t.Fatalf("handleWAL(%q): %v", data[0], err)
	}
}

// pgoutput messages (protocol version 1), as the server sends them.

func be32(b []byte, v uint32) []byte { return binary.BigEndian.AppendUint32(b, v) }
func be64(b []byte, v uint64) []byte { return binary.BigEndian.AppendUint64(b, v) }

// pgBegin: 'B', final (commit) LSN, commit time, xid.
func pgBegin(commit pglogrepl.LSN, xid uint32) []byte {
	b := be64([]byte{'B'}, uint64(commit))
	b = be64(b, 0)
	return be32(b, xid)
}

// pgCommit: 'C', flags, commit LSN, end LSN, commit time.
func pgCommit(commit pglogrepl.LSN) []byte {
	b := be64([]byte{'C', 0}, uint64(commit))
	b = be64(b, uint64(commit)+16)
	return be64(b, 0)
}

// outboxColumns are the router's default column names.
var outboxColumns = []string{"id", "aggregate_type", "aggregate_id", "event_type", "payload", "headers"}

// pgRelation: 'R', OID, namespace, name, replica identity, column count,
// then per column flags, name, type OID, type modifier.
func pgRelation(id uint32, ns, name string) []byte {
	b := be32([]byte{'R'}, id)
	b = append(append(b, ns...), 0)
	b = append(append(b, name...), 0)
	b = append(b, 'd', 0, byte(len(outboxColumns)))
	for _, c := range outboxColumns {
		b = append(b, 0)
		b = append(append(b, c...), 0)
		oid := uint32(25) // text
		if c == "payload" || c == "headers" {
			oid = 3802 // jsonb
		}
		b = be32(b, oid)
		b = be32(b, 0xFFFFFFFF)
	}
	return b
}

// pgInsert: 'I', relation OID, 'N', column count, then per column 't',
// length, text.
func pgInsert(rel uint32, id, aggID, payload string) []byte {
	b := be32([]byte{'I'}, rel)
	b = append(b, 'N', 0, byte(len(outboxColumns)))
	for _, v := range []string{id, "order", aggID, "created", payload, "{}"} {
		b = be32(append(b, 't'), uint32(len(v)))
		b = append(b, v...)
	}
	return b
}

// pgMessage: 'M', flags, LSN, prefix, content length, content.
func pgMessage(transactional bool, lsn pglogrepl.LSN, prefix, content string) []byte {
	var flags byte
	if transactional {
		flags = 1
	}
	b := be64([]byte{'M', flags}, uint64(lsn))
	b = append(append(b, prefix...), 0)
	b = be32(b, uint32(len(content)))
	return append(b, content...)
}
