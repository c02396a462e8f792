// Helpers of the bad-input suite (badinput_test.go): running walbox to its
// exit, checking the fatal line, and each case's own database and topics.

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/slotctl"
)

// --- running walbox -------------------------------------------------------

// biProc is a walbox process whose stdout is kept apart from its stderr,
// so that the suite can check diagnostics go to stderr only.
type biProc struct {
	*proc
	stdout *logbuf.Buffer
}

// startWalboxSplit is startWalbox with stdout captured separately.
func startWalboxSplit(t *testing.T, env []string, args ...string) *biProc {
	t.Helper()
	out := &logbuf.Buffer{}
	return &biProc{proc: startWalboxOut(t, env, out, append([]string{"run"}, args...)...), stdout: out}
}

type biResult struct {
	code           int
	stderr, stdout string
}

func runWalboxToExit(t *testing.T, env, args []string, timeout time.Duration) biResult {
	t.Helper()
	return waitExit(t, startWalboxSplit(t, env, args...), timeout)
}

func waitExit(t *testing.T, p *biProc, timeout time.Duration) biResult {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("walbox still running after %s, want it to stop with an error; stderr:\n%s", timeout, p.stderr.Tail(6000))
	}
	return biResult{code: p.cmd.ProcessState.ExitCode(), stderr: p.stderr.String(), stdout: p.stdout.String()}
}

// checkFatal checks the exit code and the output of a walbox that stopped
// on an error, and returns the reason from the stderr one-liner: the last
// line is "walbox: <reason>" and holds every want; every line before it is
// a JSON log line; for exit code 1 exactly one of them is level=ERROR
// msg=fatal with the same error; for exit code 2 (configuration) there is
// no log at all, only the one line.
func checkFatal(t *testing.T, res biResult, wantCode int, want, notWant []string) string {
	t.Helper()
	if res.code != wantCode {
		t.Errorf("exit code %d, want %d", res.code, wantCode)
	}
	if res.stdout != "" {
		t.Errorf("walbox wrote to stdout, want diagnostics on stderr only:\n%s", res.stdout)
	}
	lines := strings.Split(strings.TrimRight(res.stderr, "\n"), "\n")
	last := lines[len(lines)-1]
	reason, ok := strings.CutPrefix(last, "walbox: ")
	if !ok {
		t.Errorf("last line of stderr is %q, want \"walbox: <reason>\"", last)
	}
	for _, w := range want {
		if !strings.Contains(reason, w) {
			t.Errorf("stderr one-liner does not contain %q:\n  %s", w, last)
		}
	}
	for _, nw := range notWant {
		if strings.Contains(res.stderr+res.stdout, nw) {
			t.Errorf("output contains %q, which must not appear:\n%s", nw, res.stderr)
		}
	}
	log := lines[:len(lines)-1]
	if wantCode == 2 && len(log) > 0 {
		t.Errorf("a configuration error printed %d more lines before the one-liner, want exactly one line:\n%s", len(log), res.stderr)
	}
	var fatal []string
	for i, l := range log {
		var rec struct {
			Level string `json:"level"`
			Msg   string `json:"msg"`
			Err   string `json:"err"`
		}
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			if wantCode != 2 {
				t.Errorf("output line %d is not a JSON log line: %q", i+1, l)
			}
			continue
		}
		if rec.Level == "ERROR" && rec.Msg == "fatal" {
			fatal = append(fatal, rec.Err)
		}
	}
	if wantCode == 1 {
		switch {
		case len(fatal) != 1:
			t.Errorf("%d level=ERROR msg=fatal log lines, want 1", len(fatal))
		case strings.ReplaceAll(fatal[0], "\n", ";") != reason:
			t.Errorf("the fatal log line's err differs from the stderr one-liner:\n  log:    %q\n  stderr: %q", fatal[0], reason)
		}
	}
	return reason
}

var lsnInMessage = regexp.MustCompile(`(?i)\blsn ([0-9A-F]+/[0-9A-F]+)`)

// checkLSNIn returns the LSN the message names, which must lie in [lo, hi).
func checkLSNIn(t *testing.T, msg string, lo, hi pglogrepl.LSN) pglogrepl.LSN {
	t.Helper()
	m := lsnInMessage.FindStringSubmatch(msg)
	if m == nil {
		t.Errorf("the message names no LSN: %s", msg)
		return 0
	}
	lsn, err := pglogrepl.ParseLSN(m[1])
	if err != nil {
		t.Errorf("LSN %q in the message: %v", m[1], err)
		return 0
	}
	if lsn < lo || lsn >= hi {
		t.Errorf("the message names LSN %s, want the bad row's, in [%s, %s)", lsn, lo, hi)
	}
	return lsn
}

// hasLogLine reports whether a JSON log line of level holds every substring.
func hasLogLine(out, level string, subs ...string) bool {
	for _, l := range strings.Split(out, "\n") {
		var rec struct {
			Level string `json:"level"`
		}
		if json.Unmarshal([]byte(l), &rec) != nil || rec.Level != level {
			continue
		}
		all := true
		for _, s := range subs {
			all = all && strings.Contains(l, s)
		}
		if all {
			return true
		}
	}
	return false
}

func delivered(col *collector, topic, eventID string) int {
	n := 0
	for _, r := range col.snapshot() {
		if r.Topic == topic && r.Headers["event_id"] == eventID {
			n++
		}
	}
	return n
}

func onTopic(col *collector, topic string) []outboxtest.Received {
	var out []outboxtest.Received
	for _, r := range col.snapshot() {
		if r.Topic == topic {
			out = append(out, r)
		}
	}
	return out
}

// --- one case's world -----------------------------------------------------

var biSeq atomic.Int64

// biEnv is one case's database, names and broker.
type biEnv struct {
	db      string    // "" for configuration cases, which need no server
	dsn     string    // what walbox connects with
	conn    *pgx.Conn // superuser, to db
	brokers []string
	slot    string // cluster-wide, so unique per case
	prefix  string // topic prefix, unique per case
	dir     string
	role    string
	badID   string // the id of the row the case is about
	adm     *kadm.Client
	ctx     context.Context
	// lsnBefore is the WAL position just before that row was written.
	lsnBefore pglogrepl.LSN
}

func newBiEnv(ctx context.Context, t *testing.T, pg *pgtest.Server, brokers []string) *biEnv {
	t.Helper()
	n := biSeq.Add(1)
	e := &biEnv{
		brokers: brokers,
		slot:    fmt.Sprintf("badinput_%d", n),
		prefix:  fmt.Sprintf("badinput.%d", n),
		dir:     t.TempDir(),
		ctx:     ctx,
	}
	if pg == nil {
		return e
	}
	e.db = pgtest.NewDatabase(t, pg)
	e.dsn = pg.DSN(e.db)
	conn, err := pgx.Connect(ctx, e.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	e.conn = conn
	return e
}

func (e *biEnv) walboxEnv() []string {
	return []string{
		"WALBOX_PG_DSN=" + e.dsn,
		"WALBOX_KAFKA_BROKERS=" + strings.Join(e.brokers, ","),
		"WALBOX_SLOT=" + e.slot,
		"WALBOX_TOPIC=" + e.prefix + ".{aggregate_type}",
		"WALBOX_STATUS_INTERVAL=200ms",
		"WALBOX_METRICS_ADDR=127.0.0.1:0",
		"WALBOX_LOG_LEVEL=info",
		"WALBOX_RECONNECT_BACKOFF_MIN=100ms",
		"WALBOX_RECONNECT_BACKOFF_MAX=1s",
	}
}

func (e *biEnv) expandAll(in []string) []string {
	r := strings.NewReplacer("{dir}", e.dir, "{slot}", e.slot, "{prefix}", e.prefix, "{db}", e.db, "{role}", e.role, "{bad}", e.badID)
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = r.Replace(s)
	}
	return out
}

func (e *biEnv) writeFile(t *testing.T, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(e.dir, name), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (e *biEnv) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	if _, err := e.conn.Exec(e.ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", strings.TrimSpace(sql), err)
	}
}

// ensureSlot creates the publication and the slot, as walbox would, so that
// rows written before walbox starts are streamed.
func (e *biEnv) ensureSlot(t *testing.T) {
	t.Helper()
	cfg := slotctl.Config{Table: "public.outbox", Slot: e.slot, Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(e.ctx, e.conn, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(e.ctx, e.conn, cfg); err != nil {
		t.Fatal(err)
	}
}

// holdSlot streams from the slot on a connection of the test's own, as a
// second walbox would, until the case ends.
func (e *biEnv) holdSlot(t *testing.T) {
	t.Helper()
	conn, err := pgconn.Connect(e.ctx, e.dsn+"&replication=database")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	if err := pglogrepl.StartReplication(e.ctx, conn, e.slot, 0, pglogrepl.StartReplicationOptions{
		PluginArgs: []string{"proto_version '1'", "publication_names 'walbox'"},
	}); err != nil {
		t.Fatalf("hold slot %s: %v", e.slot, err)
	}
}

// insert writes one row in its own transaction and returns its id.
func (e *biEnv) insert(t *testing.T, r outboxRow) string {
	t.Helper()
	var id string
	err := e.conn.QueryRow(e.ctx, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)
		VALUES (gen_random_uuid(), $1, $2, $3, $4::text::jsonb, $5::text::jsonb) RETURNING id::text`,
		r.aggType, r.aggID, r.eventType, r.payload, r.headers).Scan(&id)
	if err != nil {
		t.Fatalf("insert outbox row: %v", err)
	}
	return id
}

func (e *biEnv) currentLSN(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := e.conn.QueryRow(e.ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err != nil {
		t.Fatal(err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

func (e *biEnv) confirmedLSN(t *testing.T) pglogrepl.LSN {
	t.Helper()
	var s string
	if err := e.conn.QueryRow(e.ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, e.slot).Scan(&s); err != nil {
		t.Fatalf("read slot %s: %v", e.slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return lsn
}

// admin returns the case's admin client, created on first use.
func (e *biEnv) admin(t *testing.T) *kadm.Client {
	t.Helper()
	if e.adm == nil {
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		e.adm = kadm.NewClient(cl)
	}
	return e.adm
}

func (e *biEnv) createTopics(ctx context.Context, t *testing.T, topics ...string) {
	t.Helper()
	resp, err := e.admin(t).CreateTopics(ctx, 1, 1, nil, topics...)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range resp.Sorted() {
		if r.Err != nil {
			t.Fatalf("create topic %s: %v", r.Topic, r.Err)
		}
	}
}

// recordCount returns how many records the case's topics hold, from their
// end offsets: unlike a consumer, it cannot miss one that is on its way.
func (e *biEnv) recordCount(ctx context.Context, t *testing.T) int64 {
	t.Helper()
	topics, err := e.admin(t).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, name := range topics.Names() {
		if strings.HasPrefix(name, e.prefix+".") {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return 0
	}
	return e.topicCount(ctx, t, names...)
}

// settle waits until the collector has seen every record the case's topics
// hold, so that checks on what it saw are exact.
func (e *biEnv) settle(ctx context.Context, t *testing.T, col *collector) {
	t.Helper()
	want := e.recordCount(ctx, t)
	waitUntil(ctx, t, 30*time.Second, fmt.Sprintf("the consumer to read the %d records on %s.*", want, e.prefix), func() bool {
		n := 0
		for _, r := range col.snapshot() {
			if strings.HasPrefix(r.Topic, e.prefix+".") {
				n++
			}
		}
		return int64(n) >= want
	})
}

func (e *biEnv) topicCount(ctx context.Context, t *testing.T, topics ...string) int64 {
	t.Helper()
	offsets, err := e.admin(t).ListEndOffsets(ctx, topics...)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	offsets.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			t.Errorf("end offset of %s/%d: %v", o.Topic, o.Partition, o.Err)
			return
		}
		n += o.Offset
	})
	return n
}
