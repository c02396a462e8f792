package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// tid is the n-th id of these tests: uuids that sort like n.
func tid(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

type tableEnv struct {
	*setupEnv
	brokers []string
	env     map[string]string
}

func newTableEnv(t *testing.T, opts ...kfake.Opt) *tableEnv {
	t.Helper()
	if opts == nil {
		opts = []kfake.Opt{kfake.AllowAutoTopicCreation()}
	}
	cluster, err := kfake.NewCluster(append(opts, kfake.NumBrokers(1), kfake.DefaultNumPartitions(3))...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	e := &tableEnv{setupEnv: newSetupEnv(t), brokers: cluster.ListenAddrs()}
	e.env = map[string]string{"WALBOX_PG_DSN": e.cfg.PGDSN, "WALBOX_KAFKA_BROKERS": strings.Join(e.brokers, ","), "WALBOX_LOG_FORMAT": "text"}
	return e
}

// insert commits one transaction with a row per id n: aggregate
// "<typ>-<n%aggs>", payload {"n": n}.
func (e *tableEnv) insert(t *testing.T, typ string, aggs int, ns ...int) {
	t.Helper()
	tx, err := e.conn.Begin(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck
	for _, n := range ns {
		if _, err := tx.Exec(ctxT(t), `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, headers)
VALUES ($1, $2, $3, $2 || '.updated', jsonb_build_object('n', $4::int), jsonb_build_object('trace_id', 't' || $4::int))`,
			tid(n), typ, fmt.Sprintf("%s-%d", typ, n%aggs), n); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctxT(t)); err != nil {
		t.Fatal(err)
	}
}

func (e *tableEnv) replay(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr strings.Builder
	code := mainCode(append([]string{"replay"}, args...), func(k string) string { return e.env[k] }, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// consume reads n records of the topics matching re, then polls briefly
// for extras (none expected).
func (e *tableEnv) consume(t *testing.T, re string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...), kgo.ConsumeRegex(), kgo.ConsumeTopics(re),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []*kgo.Record
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(got) < n {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			t.Fatalf("read %d of %d records of %s", len(got), n, re)
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, r) })
	}
	pctx, pcancel := context.WithTimeout(context.Background(), time.Second)
	defer pcancel()
	cl.PollFetches(pctx).EachRecord(func(r *kgo.Record) { got = append(got, r) })
	return got
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// TestReplayFromTable: walbox replay --from-table sends exactly the rows
// selected by inclusive --from-id/--to-id or by --where, in the order of
// the id column (not the order of insertion), with the usual key, headers
// and the replay header, to --topic; a dry run sends nothing; a bad
// --where or id is refused naming the option and the server's error; the
// transaction is read only.
func TestReplayFromTable(t *testing.T) {
	parallel(t)
	e := newTableEnv(t)
	// Committed out of id order: C's ids first, then A, then B.
	e.insert(t, "order", 2, 9, 10, 11, 12)
	e.insert(t, "order", 2, 1, 2, 3, 4)
	e.insert(t, "customer", 1, 5, 6, 7)
	e.insert(t, "order", 2, 8)

	t.Run("inclusive ids, topic override, order", func(t *testing.T) {
		code, stdout, stderr := e.replay(t, "--from-table", "--from-id", tid(3), "--to-id", tid(10), "--topic", "ids.{aggregate_type}")
		if code != exitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		t.Logf("stdout:\n%sstderr:\n%s", stdout, stderr)
		if !containsLine(stdout, "ids.order", "5") || !containsLine(stdout, "ids.customer", "3") {
			t.Errorf("stdout lacks the counts:\n%s", stdout)
		}
		got := e.consume(t, `ids\..*`, 8)
		if len(got) != 8 {
			t.Fatalf("got %d records, want 8 (ids 3..10)", len(got))
		}
		last := map[string]int{}
		seen := map[int]bool{}
		for _, r := range got {
			var n int
			if _, err := fmt.Sscanf(header(r, "event_id"), "00000000-0000-4000-8000-%012d", &n); err != nil || n < 3 || n > 10 {
				t.Errorf("record with event_id %q, want ids 3..10", header(r, "event_id"))
				continue
			}
			seen[n] = true
			if header(r, "walbox_replay") != "true" || header(r, "trace_id") != fmt.Sprintf("t%d", n) {
				t.Errorf("id %d: headers %v", n, r.Headers)
			}
			typ := map[bool]string{true: "customer", false: "order"}[n >= 5 && n <= 7]
			wantKey := fmt.Sprintf("%s-%d", typ, n%map[bool]int{true: 1, false: 2}[typ == "customer"])
			if r.Topic != "ids."+typ || string(r.Key) != wantKey {
				t.Errorf("id %d on %s key %s, want ids.%s key %s", n, r.Topic, r.Key, typ, wantKey)
			}
			if n <= last[string(r.Key)] {
				t.Errorf("key %s: id %d after %d", r.Key, n, last[string(r.Key)])
			}
			last[string(r.Key)] = n
		}
		if len(seen) != 8 {
			t.Errorf("ids seen %v, want 3..10 each once", seen)
		}
	})

	t.Run("where", func(t *testing.T) {
		code, stdout, stderr := e.replay(t, "--from-table", "--where", "aggregate_type = 'customer' AND payload->>'n' <> '6'", "--topic", "where.{aggregate_type}")
		if code != exitOK || !containsLine(stdout, "where.customer", "2") || strings.Contains(stdout, "where.order") {
			t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		got := e.consume(t, `where\..*`, 2)
		if len(got) != 2 || header(got[0], "event_id") != tid(5) || header(got[1], "event_id") != tid(7) {
			t.Errorf("got %d records, want ids 5 and 7 in order", len(got))
		}
	})

	t.Run("dry run sends nothing", func(t *testing.T) {
		code, stdout, stderr := e.replay(t, "--from-table", "--where", "true", "--topic", "dry.{aggregate_type}", "--dry-run")
		if code != exitOK || !containsLine(stdout, "dry.order", "9") || !containsLine(stdout, "dry.customer", "3") || !strings.Contains(stdout, "DRY RUN") {
			t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(e.brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		topics, err := kadm.NewClient(cl).ListTopics(ctxT(t))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range topics.Names() {
			if strings.HasPrefix(name, "dry.") {
				t.Errorf("the dry run created topic %s", name)
			}
		}
	})

	t.Run("snapshot-order", func(t *testing.T) {
		code, _, stderr := e.replay(t, "--from-table", "--where", "true -- every row", "--snapshot-order", "created_at,id", "--dry-run")
		if code != exitOK || !strings.Contains(stderr, "12 of 12 matching rows found (dry run, nothing sent), from table public.outbox in order of [created_at id]") {
			t.Errorf("exit %d, stderr: %s", code, stderr)
		}
		code, _, stderr = e.replay(t, "--from-table", "--where", "true", "--snapshot-order", "nosuch", "--dry-run")
		if code != exitFatal || !strings.Contains(stderr, `--snapshot-order names column "nosuch"`) {
			t.Errorf("exit %d, stderr: %s", code, stderr)
		}
	})

	t.Run("refusals", func(t *testing.T) {
		for _, tc := range []struct {
			args []string
			code int
			want []string
		}{
			{[]string{"--from-table", "--where", "nosuch > 1"}, exitFatal, []string{`--where "nosuch > 1"`, `column "nosuch" does not exist`}},
			{[]string{"--from-table", "--from-id", "7"}, exitFatal, []string{`--from-id "7"`, "invalid input syntax for type uuid"}},
			{[]string{"--from-table", "--where", "nextval('walbox_test_seq') > 0"}, exitFatal, []string{"cannot execute nextval() in a read-only transaction"}},
		} {
			e.exec(t, `CREATE SEQUENCE IF NOT EXISTS walbox_test_seq`)
			code, _, stderr := e.replay(t, tc.args...)
			if code != tc.code {
				t.Errorf("%v: exit %d, want %d; stderr: %s", tc.args, code, tc.code, stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("%v: stderr lacks %q: %s", tc.args, w, stderr)
				}
			}
		}
		var v *int64
		if err := e.conn.QueryRow(ctxT(t), `SELECT last_value FROM walbox_test_seq WHERE is_called`).Scan(&v); err == nil {
			t.Errorf("the read-only replay moved a sequence to %v", v)
		}
	})
}

// TestReplayFromTableBatches: 2,500 rows of one aggregate, inserted in
// reverse id order, are sent in id order across the 1,000-row FETCH
// batches, each once.
func TestReplayFromTableBatches(t *testing.T) {
	parallel(t)
	e := newTableEnv(t)
	e.exec(t, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload)
SELECT ('00000000-0000-4000-8000-' || lpad(n::text, 12, '0'))::uuid, 'order', 'order-1', 'order.updated', jsonb_build_object('n', n)
FROM generate_series(2500, 1, -1) AS n`)
	code, stdout, stderr := e.replay(t, "--from-table", "--where", "true", "--topic", "big.{aggregate_type}")
	if code != exitOK || !containsLine(stdout, "big.order", "2500") {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout, stderr)
	}
	got := e.consume(t, `big\..*`, 2500)
	if len(got) != 2500 {
		t.Fatalf("got %d records, want 2500", len(got))
	}
	for i, r := range got {
		if id := header(r, "event_id"); id != tid(i+1) {
			t.Fatalf("record %d is %s, want %s", i, id, tid(i+1))
		}
	}
}

// containsLine reports whether out has a line of exactly the fields f.
func containsLine(out string, f ...string) bool {
	for _, line := range strings.Split(out, "\n") {
		if strings.Join(strings.Fields(line), " ") == strings.Join(f, " ") {
			return true
		}
	}
	return false
}

// TestReplayFromTableKafkaRefuses: a broker that refuses the records
// (here: the topic does not exist and is not created automatically) fails
// the replay (exit 1) naming the event, the topic and the fix.
func TestReplayFromTableKafkaRefuses(t *testing.T) {
	parallel(t)
	e := newTableEnv(t, kfake.SeedTopics(3, "exists.order"))
	e.insert(t, "order", 1, 1, 2)
	e.insert(t, "customer", 1, 3)
	code, stdout, stderr := e.replay(t, "--from-table", "--where", "true", "--topic", "exists.{aggregate_type}")
	t.Logf("stdout:\n%sstderr: %s", stdout, tail(stderr, 700))
	if code != exitFatal {
		t.Fatalf("exit %d, want 1", code)
	}
	for _, w := range []string{tid(3), `"exists.customer"`, "the topic does not exist", "run it again after the fix"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr lacks %q", w)
		}
	}
	if !containsLine(stdout, "exists.order", "2") {
		t.Errorf("stdout does not count the 2 acknowledged events of exists.order:\n%s", stdout)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

func TestWriteTableProgress(t *testing.T) {
	var b strings.Builder
	writeTableProgress(&b, 5000, 20000, 10*time.Second)
	want := "walbox replay: 5000 of 20000 rows (25%), 500 rows/s, 10s elapsed\n"
	if b.String() != want {
		t.Errorf("got  %q\nwant %q", b.String(), want)
	}
}

// TestReplayFromTableUsage: mixing --from-table with the slot replay's
// range, or selecting rows without it, is a usage error (exit 2) found
// before connecting, naming both options.
func TestReplayFromTableUsage(t *testing.T) {
	env := map[string]string{"WALBOX_PG_DSN": "postgres://walbox@127.0.0.1:1/app", "WALBOX_KAFKA_BROKERS": "127.0.0.1:1"}
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--help"}, exitOK, "--from-table [--where SQL] [--from-id ID] [--to-id ID]"},
		{[]string{"--from-table", "--from", "0/10"}, exitUsage, "--from-table and --from exclude each other"},
		{[]string{"--from-table", "--where", "true", "--to", "0/10"}, exitUsage, "--from-table and --to exclude each other"},
		{[]string{"--from-table"}, exitUsage, "--from-table needs --where, --from-id or --to-id to select the rows to replay (--where true takes every row)"},
		{[]string{"--from", "0/10", "--where", "true"}, exitUsage, "--where selects rows of the outbox table and needs --from-table"},
		{[]string{"--from-id", tid(1)}, exitUsage, "--from-id selects rows of the outbox table and needs --from-table"},
		{[]string{"--to-id", tid(1)}, exitUsage, "--to-id selects rows of the outbox table and needs --from-table"},
	} {
		var stdout, stderr strings.Builder
		code := mainCode(append([]string{"replay"}, tc.args...), func(k string) string { return env[k] }, &stdout, &stderr)
		if code != tc.code || !strings.Contains(stdout.String()+stderr.String(), tc.want) {
			t.Errorf("%v: exit %d (want %d), output lacks %q:\n%s%s", tc.args, code, tc.code, tc.want, stderr.String(), tail(stdout.String(), 300))
		}
	}
}
