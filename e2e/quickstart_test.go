package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/childproc"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// quickstartSection is the heading of the README section that
// TestQuickstartAsWritten follows.
const quickstartSection = "## Quickstart against your database"

// TestQuickstartAsWritten runs the README's quickstart as a newcomer would:
// every ```sh and ```sql block of the section, in order, against a fresh
// Postgres (with password authentication for every role but the superuser,
// so the step that sets walbox's password is needed) and a real Kafka broker.
// It fails if the steps are in an order that loses the example event (an
// event written before its slot exists is never streamed), if a command
// fails, or if the record read back differs from the output the README shows.
//
// How each block is run, without anything in the README meant for the test:
//   - ```sh blocks run with bash -eo pipefail in the repository root; the
//     variables a block exports are carried to the next ones. ADMIN_DSN,
//     WALBOX_PG_DSN and WALBOX_KAFKA_BROKERS are set beforehand to the test's
//     servers, which the README's `${VAR:-default}` exports keep.
//   - a ```sh block whose command is `walbox run …` is the long-running one:
//     it is started in the background (exec'd by bash, so it gets the
//     signal) and stopped with SIGTERM at the end, which must exit 0.
//   - a ```sh block whose command is `kcat …` is the consumer. With kcat on
//     PATH it runs as written (again until the record is there, as a person
//     would run it again a moment later); without kcat the topic it names
//     is read with franz-go instead, unless WALBOX_REQUIRE_INTEGRATION=1,
//     which makes a missing kcat a failure. The ```text block after it is
//     the expected output: key, headers and value must match, UUIDs aside.
//   - a ```sql block is fed to `psql "$ADMIN_DSN" -v ON_ERROR_STOP=1`.
//   - other blocks (```ini, ```text) are not run.
//
// `go install` writes into a GOPATH of the test's own (the module cache
// stays where it is), so binaries elsewhere on the machine are not used.
func TestQuickstartAsWritten(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := quickstartBlocks(string(readme))
	if err != nil {
		t.Fatal(err)
	}

	kcat, kcatErr := exec.LookPath("kcat")
	if kcatErr != nil && os.Getenv(pgtest.RequireEnv) == "1" {
		t.Fatalf("kcat is not on PATH and %s=1: the quickstart's consumer step must run as written (apt-get install kcat)", pgtest.RequireEnv)
	}
	pgBin := pgtest.RequireBinDir(t)
	pg := pgtest.Start(t)
	broker := kafkatest.Start(t)

	adminDSN, walboxDSN := quickstartDatabase(ctx, t, pg)
	work := t.TempDir()
	gopath := filepath.Join(work, "gopath")
	modCache, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		t.Fatalf("go env GOMODCACHE: %v", err)
	}
	env := quickstartEnv(os.Environ())
	env = append(env,
		"ADMIN_DSN="+adminDSN,
		"WALBOX_PG_DSN="+walboxDSN,
		"WALBOX_KAFKA_BROKERS="+strings.Join(broker.Addrs(), ","),
		// Not the default 127.0.0.1:9187: other tests may run beside this one.
		"WALBOX_METRICS_ADDR=127.0.0.1:0",
		"GOPATH="+gopath,
		"GOMODCACHE="+strings.TrimSpace(string(modCache)),
		"PATH="+pgBin+string(os.PathListSeparator)+os.Getenv("PATH"),
	)
	state := filepath.Join(work, "exports.sh")
	if err := os.WriteFile(state, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	bash := func(script string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, "bash", "-c", script)
		cmd.Dir = root
		cmd.Env = env
		return cmd
	}
	// prelude loads what earlier blocks exported; postlude saves it.
	prelude := "set -eo pipefail\n. " + shellQuote(state) + "\n"
	postlude := "\nexport -p > " + shellQuote(state+".new") + " && mv " + shellQuote(state+".new") + " " + shellQuote(state) + "\n"

	var walbox *quickstartProc
	consumed := false
	for i, b := range blocks {
		first := b.firstCommand()
		switch {
		case b.lang == "sql":
			t.Logf("block %d: psql with\n%s", i+1, b.text)
			script := prelude + `psql "$ADMIN_DSN" -v ON_ERROR_STOP=1 -f - <<'QUICKSTART_SQL'` + "\n" + b.text + "\nQUICKSTART_SQL\n"
			if out, err := bash(script).CombinedOutput(); err != nil {
				t.Fatalf("quickstart SQL block %d failed: %v\n%s\n--- output:\n%s", i+1, err, b.text, out)
			}
		case b.lang != "sh":
			continue
		case strings.HasPrefix(first, "walbox run") || strings.HasPrefix(first, "bin/walbox run"):
			if walbox != nil {
				t.Fatalf("quickstart block %d starts walbox a second time", i+1)
			}
			t.Logf("block %d: in the background: %s", i+1, b.text)
			walbox = startQuickstartProc(t, bash(prelude+"exec "+strings.TrimSpace(b.text)+"\n"))
		case strings.HasPrefix(first, "kcat "):
			expect, ok := b.expected, b.expected != ""
			if !ok {
				t.Fatalf("quickstart block %d (%s) is not followed by a ```text block with its output", i+1, first)
			}
			if walbox == nil {
				t.Fatalf("quickstart block %d reads from Kafka before any block runs `walbox run`", i+1)
			}
			var got string
			if kcatErr == nil {
				t.Logf("block %d: %s (kcat %s)", i+1, b.text, kcat)
				got = runConsumerUntil(ctx, t, walbox, func() (string, error) {
					out, err := bash(prelude + b.text).Output()
					return string(out), err
				}, expect)
			} else {
				topic := kcatTopic(first)
				if topic == "" {
					t.Fatalf("cannot find the topic (-t) in %q", first)
				}
				t.Logf("block %d: kcat is not installed; reading %s with franz-go instead (%v)", i+1, topic, kcatErr)
				got = readTopicAsKcat(ctx, t, walbox, broker.Addrs(), topic)
			}
			if problem := compareKcatOutput(got, expect); problem != "" {
				t.Fatalf("the record differs from the README's output: %s\ngot:\n%s\nREADME:\n%s\nwalbox log:\n%s", problem, got, expect, walbox.log.Tail(4000))
			}
			t.Logf("consumer output:\n%s", got)
			checkEventID(ctx, t, adminDSN, got)
			consumed = true
		default:
			t.Logf("block %d:\n%s", i+1, b.text)
			if out, err := bash(prelude + b.text + postlude).CombinedOutput(); err != nil {
				t.Fatalf("quickstart block %d failed: %v\n%s\n--- output:\n%s", i+1, err, b.text, out)
			}
		}
		if walbox != nil && walbox.exited() {
			t.Fatalf("walbox exited early (%v):\n%s", walbox.err, walbox.log.Tail(4000))
		}
	}
	if walbox == nil || !consumed {
		t.Fatalf("the quickstart has no `walbox run` block or no kcat block (walbox started: %v, consumed: %v)", walbox != nil, consumed)
	}
	if code := walbox.stop(t, 30*time.Second); code != 0 {
		t.Fatalf("walbox exited %d after SIGTERM, want 0:\n%s", code, walbox.log.Tail(4000))
	}
}

// quickstartBlock is one fenced block of the quickstart section.
type quickstartBlock struct {
	lang, text string
	// expected is the text of a ```text block that directly follows this
	// one, if any: its output.
	expected string
}

// firstCommand returns the block's first line that is neither blank nor a
// comment.
func (b quickstartBlock) firstCommand() string {
	for _, l := range strings.Split(b.text, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") && !strings.HasPrefix(l, "--") {
			return l
		}
	}
	return ""
}

var fenceRE = regexp.MustCompile("^\\s*```\\s*([A-Za-z0-9_-]*)\\s*$")

// quickstartBlocks returns the fenced blocks of the README's quickstart
// section, in order, their indentation removed.
func quickstartBlocks(readme string) ([]quickstartBlock, error) {
	start := strings.Index(readme, "\n"+quickstartSection+"\n")
	if start < 0 {
		return nil, fmt.Errorf("README.md has no %q section", quickstartSection)
	}
	section := readme[start+1:]
	if end := strings.Index(section[len(quickstartSection):], "\n## "); end >= 0 {
		section = section[:len(quickstartSection)+end]
	}
	var blocks []quickstartBlock
	var cur *quickstartBlock
	var indent string
	var body []string
	sc := bufio.NewScanner(strings.NewReader(section))
	for sc.Scan() {
		line := sc.Text()
		m := fenceRE.FindStringSubmatch(line)
		switch {
		case cur == nil && m != nil:
			cur = &quickstartBlock{lang: m[1]}
			indent = line[:len(line)-len(strings.TrimLeft(line, " \t"))]
			body = nil
		case cur != nil && m != nil && m[1] == "":
			cur.text = strings.Join(body, "\n")
			if cur.lang == "text" && len(blocks) > 0 && blocks[len(blocks)-1].expected == "" {
				blocks[len(blocks)-1].expected = cur.text
			}
			blocks = append(blocks, *cur)
			cur = nil
		case cur != nil:
			body = append(body, strings.TrimPrefix(line, indent))
		}
	}
	if cur != nil {
		return nil, fmt.Errorf("the quickstart has an unclosed ```%s block", cur.lang)
	}
	return blocks, nil
}

// quickstartDatabase makes a database "app" on pg in which only the
// superuser may connect without a password, and returns the superuser's
// DSN and the DSN of the README's walbox role, both for 127.0.0.1.
func quickstartDatabase(ctx context.Context, t *testing.T, pg *pgtest.Server) (adminDSN, walboxDSN string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, pg.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE app"); err != nil {
		t.Fatal(err)
	}
	hba := "# written by e2e TestQuickstartAsWritten: passwords for everyone but postgres\n" +
		"local all         all                    trust\n" +
		"local replication all                    trust\n" +
		"host  all         postgres 127.0.0.1/32  trust\n" +
		"host  replication postgres 127.0.0.1/32  trust\n" +
		"host  all         all      127.0.0.1/32  scram-sha-256\n" +
		"host  replication all      127.0.0.1/32  scram-sha-256\n"
	if err := os.WriteFile(filepath.Join(pg.DataDir(), "pg_hba.conf"), []byte(hba), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT pg_reload_conf()"); err != nil {
		t.Fatal(err)
	}
	host := fmt.Sprintf("127.0.0.1:%d", pg.Port())
	return "postgres://postgres@" + host + "/app", "postgres://walbox:secret@" + host + "/app"
}

// quickstartEnv returns environ without the settings of the person running
// the test that would change what the quickstart's commands do: walbox's
// own variables, libpq's PG* variables and Go's GOBIN/GOPATH.
func quickstartEnv(environ []string) []string {
	var out []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(name, "WALBOX_") && name != pgtest.RequireEnv,
			strings.HasPrefix(name, "PG") && name != "PG_BIN",
			name == "GOBIN", name == "GOPATH", name == "GOMODCACHE", name == "PATH",
			name == "ADMIN_DSN":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// quickstartProc is the quickstart's `walbox run`, exec'd by bash.
type quickstartProc struct {
	cmd  *exec.Cmd
	log  *logbuf.Buffer
	done chan struct{}
	err  error
}

func startQuickstartProc(t *testing.T, cmd *exec.Cmd) *quickstartProc {
	t.Helper()
	p := &quickstartProc{cmd: cmd, log: &logbuf.Buffer{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = p.log, p.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return cmd.Process.Kill() }
	child, err := childproc.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		p.err = child.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		if !p.exited() {
			_ = cmd.Process.Kill()
			<-p.done
		}
		if t.Failed() {
			t.Logf("walbox run (pid %d) output:\n%s", cmd.Process.Pid, p.log.Tail(8000))
		}
	})
	return p
}

func (p *quickstartProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *quickstartProc) stop(t *testing.T, timeout time.Duration) int {
	t.Helper()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("walbox did not exit within %s of SIGTERM", timeout)
	}
	return p.cmd.ProcessState.ExitCode()
}

// consumeDeadline bounds how long the consumer step is retried. The event
// normally arrives within a second of walbox streaming; an event that was
// written before its slot existed never arrives.
const consumeDeadline = 45 * time.Second

// runConsumerUntil runs consume until its output holds as many records as
// expect shows, and returns it. It fails t at the deadline, or when walbox
// exits.
func runConsumerUntil(ctx context.Context, t *testing.T, walbox *quickstartProc, consume func() (string, error), expect string) string {
	t.Helper()
	want := len(nonEmptyLines(expect))
	deadline := time.Now().Add(consumeDeadline)
	var out string
	var err error
	for {
		out, err = consume()
		if err == nil && len(nonEmptyLines(out)) >= want {
			return out
		}
		if walbox.exited() {
			t.Fatalf("walbox exited (%v) before the record arrived:\n%s", walbox.err, walbox.log.Tail(4000))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("no record after %s (were the steps in an order that works? a slot sees only what commits after it is created): last consumer error %v, output:\n%s\nwalbox log:\n%s",
				consumeDeadline, err, out, walbox.log.Tail(4000))
		}
		time.Sleep(500 * time.Millisecond) // a person running the command again
	}
}

// readTopicAsKcat reads the first record of topic with franz-go and
// renders it as kcat -f '%k %h %s\n' would (headers sorted by name).
func readTopicAsKcat(ctx context.Context, t *testing.T, walbox *quickstartProc, brokers []string, topic string) string {
	t.Helper()
	c, err := outboxtest.NewConsumer(brokers, "^"+regexp.QuoteMeta(topic)+"$")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rctx, cancel := context.WithTimeout(ctx, consumeDeadline)
	defer cancel()
	got, err := c.ReadUntil(rctx, func(r []outboxtest.Received) bool { return len(r) >= 1 })
	if err != nil || len(got) == 0 {
		t.Fatalf("no record on %s after %s (were the steps in an order that works?): %v\nwalbox log:\n%s", topic, consumeDeadline, err, walbox.log.Tail(4000))
	}
	var hs []string
	for k, v := range got[0].Headers {
		hs = append(hs, k+"="+v)
	}
	return got[0].Key + " " + strings.Join(slices.Sorted(slices.Values(hs)), ",") + " " + string(got[0].Value) + "\n"
}

// kcatTopic returns the argument of -t in a kcat command line.
func kcatTopic(cmd string) string {
	f := strings.Fields(cmd)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-t" {
			return strings.Trim(f[i+1], `"'`)
		}
	}
	return ""
}

var quickstartUUID = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// kcatRecord is one line of kcat -f '%k %h %s\n': key, headers, value.
type kcatRecord struct {
	key     string
	headers map[string]string
	value   string
}

func parseKcatLine(line string) (kcatRecord, error) {
	key, rest, ok1 := strings.Cut(line, " ")
	hdrs, value, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 {
		return kcatRecord{}, fmt.Errorf("%q is not \"key headers value\"", line)
	}
	r := kcatRecord{key: key, value: value, headers: map[string]string{}}
	for _, h := range strings.Split(hdrs, ",") {
		k, v, ok := strings.Cut(h, "=")
		if !ok {
			return kcatRecord{}, fmt.Errorf("header %q of %q is not name=value", h, line)
		}
		r.headers[k] = quickstartUUID.ReplaceAllString(v, "<uuid>")
	}
	return r, nil
}

// compareKcatOutput compares got with the README's expected output line by
// line, as key, header set and value; UUIDs (the event id) compare equal.
// It returns "" when they match, else what differs.
func compareKcatOutput(got, expect string) string {
	g, e := nonEmptyLines(got), nonEmptyLines(expect)
	if len(g) != len(e) {
		return fmt.Sprintf("%d records, the README shows %d", len(g), len(e))
	}
	for i := range g {
		gr, err := parseKcatLine(g[i])
		if err != nil {
			return err.Error()
		}
		er, err := parseKcatLine(e[i])
		if err != nil {
			return "README: " + err.Error()
		}
		if gr.key != er.key {
			return fmt.Sprintf("record %d: key %q, README %q", i+1, gr.key, er.key)
		}
		if gr.value != er.value {
			return fmt.Sprintf("record %d: value %s, README %s", i+1, gr.value, er.value)
		}
		if len(gr.headers) != len(er.headers) {
			return fmt.Sprintf("record %d: headers %v, README %v", i+1, gr.headers, er.headers)
		}
		for k, v := range er.headers {
			if gv, ok := gr.headers[k]; !ok || gv != v {
				return fmt.Sprintf("record %d: header %s = %q, README %q", i+1, k, gv, v)
			}
		}
	}
	return ""
}

// checkEventID checks that the event_id header of every record in the
// consumer's output is the id of an outbox row.
func checkEventID(ctx context.Context, t *testing.T, adminDSN, out string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, line := range nonEmptyLines(out) {
		_, rest, _ := strings.Cut(line, " ")
		hdrs, _, _ := strings.Cut(rest, " ")
		var id string
		for _, h := range strings.Split(hdrs, ",") {
			if v, ok := strings.CutPrefix(h, "event_id="); ok {
				id = v
			}
		}
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM public.outbox WHERE id::text = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 1 {
			t.Errorf("event_id %q of %q is not the id of an outbox row", id, line)
		}
	}
}

func nonEmptyLines(s string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.TrimSpace(l) != "" {
			out = append(out, strings.TrimRight(l, "\r"))
		}
	}
	return out
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
