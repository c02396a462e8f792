package e2e

// The bad-input suite: every way an operator or a writer can hand walbox
// something it cannot use, run against the built binary. Each case must end
// in a clear error that names the value at fault and the fix, and must lose
// or silently skip nothing. The cases are the two tables below:
//
//   - startupCases: configuration and server state. walbox must stop with
//     exit code 2 (usage/configuration) or 1 (fatal), the last line of
//     stderr being "walbox: <reason>" and, for exit 1, the JSON log holding
//     exactly one level=ERROR msg=fatal line with the same error.
//   - badRowCases: outbox rows that cannot become a Kafka record, each run
//     under the fail policy (walbox stops before confirming the row, names
//     it, and stops again on it after a restart) and the dead-letter policy
//     (the row goes to the dead-letter topic with the reason, the rows
//     around it are delivered, the slot moves past everything).
//
// A row is either met while walbox streams (the first row delivered before
// the bad one is written) or in a backlog written before walbox starts,
// the situation after any downtime, where the rows around the bad one are
// read, and for a real broker batched, together with it.
//
// Groups share servers to stay fast on two cores: one Postgres per test
// function (a database and a slot per case), one kfake cluster for the
// Kafka-agnostic cases (a slowed one for a backlog), and one real broker
// (auto-creation off, message.max.bytes 64 KiB) for what only a real broker
// refuses. go test ./e2e -run BadInput takes about 40s.

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// badInputOutboxDDL is an outbox table that lets a writer insert every
// mistake walbox must cope with: nullable columns and headers without a
// CHECK. (migrations/001_outbox.sql forbids most of them, but walbox cannot
// assume every outbox table does.)
const badInputOutboxDDL = `
CREATE TABLE public.outbox (
    id             uuid        PRIMARY KEY,
    aggregate_type text,
    aggregate_id   text,
    event_type     text,
    payload        jsonb,
    headers        jsonb,
    created_at     timestamptz NOT NULL DEFAULT now()
)`

// badInputColumns is how walbox's messages list that table's columns.
const badInputColumns = "id, aggregate_type, aggregate_id, event_type, payload, headers, created_at"

// Which servers a startup case needs.
type biNeeds int

const (
	needNothing         biNeeds = iota // configuration only: walbox stops before connecting
	needPostgres                       // the shared wal_level=logical server, a database of its own
	needWALLevelReplica                // a server with wal_level=replica
	needRealBroker                     // the real broker of TestBadInputKafka (auto-creation off)
)

// startupCase is one configuration or server-state mistake.
type startupCase struct {
	name  string
	needs biNeeds
	// setup prepares the case's database (or files) before walbox starts;
	// it may change e.dsn to connect as another role.
	setup func(t *testing.T, e *biEnv)
	args  []string // flags; {dir}, {slot}, {prefix}, {db}, {role} are expanded
	env   []string // extra environment, after the base one (see biEnv.walboxEnv)
	// wantCode is the exit code; want are substrings of the stderr
	// one-liner (expanded like args); notWant must appear nowhere in the
	// output.
	wantCode int
	want     []string
	notWant  []string
	// timeout bounds the wait for walbox to exit (default 60s).
	timeout time.Duration
	// after runs extra checks once walbox has exited.
	after func(t *testing.T, e *biEnv)
}

// distinctPassword is the password of the malformed DSN. Not "secret":
// walbox's own hint quotes the example DSN postgres://walbox:secret@..., so
// "secret" legitimately appears in the message.
const distinctPassword = "hunter2pw"

var startupCases = []startupCase{
	// --- configuration: exit 2, before anything is contacted -----------
	{
		name:  "config/yaml_unknown_key",
		needs: needNothing,
		setup: func(t *testing.T, e *biEnv) {
			e.writeFile(t, "walbox.yaml", "pg_dsn: postgres://walbox@127.0.0.1:1/app\n"+
				"kafka_brokers: [127.0.0.1:9092]\n"+
				"status_intervall: 1s\n")
		},
		args:     []string{"--config", "{dir}/walbox.yaml"},
		wantCode: 2,
		want:     []string{"walbox.yaml:3", `unknown key "status_intervall"`, `did you mean "status_interval"`},
	},
	{
		name:     "config/malformed_dsn",
		needs:    needNothing,
		args:     []string{"--pg-dsn", "postgres://u:" + distinctPassword + "@127.0.0.1:notaport/db", "--kafka-brokers", "127.0.0.1:9092"},
		wantCode: 2,
		want: []string{"--pg-dsn (WALBOX_PG_DSN)", "postgres://u:xxxxx@127.0.0.1:notaport/db", "invalid port",
			"expected a libpq URL"},
		notWant: []string{distinctPassword},
	},
	{
		name:     "config/empty_broker_list_flag",
		needs:    needNothing,
		args:     []string{"--pg-dsn", "postgres://walbox@127.0.0.1:1/app", "--kafka-brokers="},
		wantCode: 2,
		want:     []string{"missing --kafka-brokers (WALBOX_KAFKA_BROKERS)", "host:port"},
	},
	{
		name:     "config/empty_broker_list_env",
		needs:    needNothing,
		env:      []string{"WALBOX_PG_DSN=postgres://walbox@127.0.0.1:1/app", "WALBOX_KAFKA_BROKERS="},
		wantCode: 2,
		want:     []string{"missing --kafka-brokers (WALBOX_KAFKA_BROKERS)", "host:port"},
	},
	{
		name:     "config/invalid_duration_flag",
		needs:    needNothing,
		args:     []string{"--pg-dsn", "postgres://walbox@127.0.0.1:1/app", "--kafka-brokers", "127.0.0.1:9092", "--status-interval", "abc"},
		wantCode: 2,
		want:     []string{`invalid value "abc" for --status-interval (WALBOX_STATUS_INTERVAL)`, "Go duration such as 1s"},
	},
	{
		name:  "config/invalid_duration_yaml",
		needs: needNothing,
		setup: func(t *testing.T, e *biEnv) {
			e.writeFile(t, "walbox.yaml", "pg_dsn: postgres://walbox@127.0.0.1:1/app\n"+
				"kafka_brokers: [127.0.0.1:9092]\n"+
				"shutdown_timeout: 30\n")
		},
		args:     []string{"--config", "{dir}/walbox.yaml"},
		wantCode: 2,
		want:     []string{"walbox.yaml:3", `invalid value "30" for --shutdown-timeout (WALBOX_SHUTDOWN_TIMEOUT)`, "Go duration"},
	},

	{
		// Every problem is reported at once, still as one line.
		name:     "config/several_problems_at_once",
		needs:    needNothing,
		args:     []string{"--kafka-brokers=", "--status-interval", "abc"},
		wantCode: 2,
		want: []string{"missing --pg-dsn (WALBOX_PG_DSN)", "missing --kafka-brokers (WALBOX_KAFKA_BROKERS)",
			`invalid value "abc" for --status-interval`},
	},

	// --- configuration only detectable against the table: exit 2, ------
	// from the preflight walbox run makes before it starts anything (the
	// same checks as walbox config check --connect).
	{
		name:  "config/topic_template_unknown_placeholder",
		needs: needPostgres,
		setup: func(t *testing.T, e *biEnv) {
			e.exec(t, badInputOutboxDDL)
		},
		args:     []string{"--topic", "x.{nope}"},
		wantCode: 2,
		want:     []string{"{nope}", `"x.{nope}"`, `column "nope"`, "public.outbox", badInputColumns},
	},

	// --- server state: exit 2 for what the preflight refuses (the server's
	// settings, the role, the table, the publication, the slot's kind),
	// exit 1 for what only happens on the way (a slot in use, Kafka). ----
	{
		name:  "server/wal_level_replica",
		needs: needWALLevelReplica,
		setup: func(t *testing.T, e *biEnv) {
			e.exec(t, badInputOutboxDDL)
		},
		wantCode: 2,
		want:     []string{"wal_level = replica", "set wal_level = logical", "restart PostgreSQL"},
	},
	{
		name:  "server/role_without_replication",
		needs: needPostgres,
		setup: func(t *testing.T, e *biEnv) {
			e.exec(t, badInputOutboxDDL)
			e.role = strings.Replace(e.slot, "badinput", "norepl", 1)
			e.exec(t, "CREATE ROLE "+e.role+" LOGIN")
			e.exec(t, "GRANT SELECT ON public.outbox TO "+e.role)
			u, err := url.Parse(e.dsn)
			if err != nil {
				t.Fatal(err)
			}
			u.User = url.User(e.role)
			e.dsn = u.String()
		},
		wantCode: 2,
		want:     []string{`role "{role}"`, "neither SUPERUSER nor REPLICATION", `ALTER ROLE "{role}" REPLICATION`},
	},
	{
		name:     "server/outbox_table_missing",
		needs:    needPostgres,
		wantCode: 2,
		want:     []string{"public.outbox does not exist", `database "{db}"`, "migrations/001_outbox.sql", "--table"},
	},
	{
		name:  "server/publication_covers_another_table",
		needs: needPostgres,
		setup: func(t *testing.T, e *biEnv) {
			e.exec(t, badInputOutboxDDL)
			e.exec(t, "CREATE TABLE public.other_table (id int PRIMARY KEY)")
			e.exec(t, "CREATE PUBLICATION walbox FOR TABLE public.other_table")
		},
		wantCode: 2,
		want: []string{`publication "walbox"`, "does not include public.outbox", "also publishes public.other_table",
			`ALTER PUBLICATION "walbox" SET TABLE "public"."outbox"`},
	},
	{
		name:  "server/slot_held_by_another_process",
		needs: needPostgres,
		setup: func(t *testing.T, e *biEnv) {
			e.exec(t, badInputOutboxDDL)
			e.ensureSlot(t)
			e.holdSlot(t)
		},
		args:     []string{"--slot-busy-timeout=3s"},
		wantCode: 1,
		want:     []string{`slot "{slot}"`, "in use by another process", "another walbox", "--slot"},
	},
	{
		name:  "server/slot_with_another_plugin",
		needs: needPostgres,
		setup: func(t *testing.T, e *biEnv) {
			e.exec(t, badInputOutboxDDL)
			e.exec(t, "SELECT pg_create_logical_replication_slot($1, 'test_decoding')", e.slot)
		},
		wantCode: 2,
		want:     []string{`slot "{slot}"`, `uses the output plugin "test_decoding", not "pgoutput"`, "slotctl drop --slot {slot}"},
	},
	{
		// franz-go retries an unknown topic a few times before failing the
		// record, hence the longer timeout.
		name:  "kafka/topic_missing_without_auto_creation",
		needs: needRealBroker,
		setup: func(t *testing.T, e *biEnv) {
			e.exec(t, badInputOutboxDDL)
			e.ensureSlot(t)
			e.lsnBefore = e.currentLSN(t)
			e.badID = e.insert(t, validRow("ord-1"))
		},
		wantCode: 1,
		want: []string{`kafka refused event "{bad}"`, `topic "{prefix}.order"`, "UNKNOWN_TOPIC_OR_PARTITION",
			"create it", "auto.create.topics.enable"},
		timeout: 90 * time.Second,
		after: func(t *testing.T, e *biEnv) {
			if c := e.confirmedLSN(t); c > e.lsnBefore {
				t.Errorf("slot confirmed %s, past the undeliverable row's transaction (WAL was at %s before it): the event would be lost", c, e.lsnBefore)
			}
		},
	},
}

// outboxRow is the value of each column of an inserted row; nil is NULL.
type outboxRow struct {
	aggType, aggID, eventType, payload, headers any
}

func validRow(aggID string) outboxRow {
	return outboxRow{"order", aggID, "OrderPlaced", `{"order_id": "` + aggID + `"}`, `{"trace": "t-` + aggID + `"}`}
}

// badRowCase is one kind of outbox row walbox cannot turn into a record.
type badRowCase struct {
	name string
	row  outboxRow
	// kafkaRefuses marks rows the router accepts and Kafka refuses; they
	// need the real broker, and under fail the row after may already be
	// in flight (and delivered) when the refusal comes back. They are
	// always written as a backlog.
	kafkaRefuses bool
	// backlog writes the three rows before walbox starts (see runBadRow).
	backlog bool
	// args are extra walbox flags under both policies.
	args []string
	// failWant are substrings of the fail policy's stderr one-liner
	// ({bad} is the bad row's id, {prefix} the case's topic prefix);
	// failMatch, when set, is a pattern it must match as well.
	failWant  []string
	failMatch *regexp.Regexp
	// dlqWant are substrings of the dead-letter record's walbox_error.
	dlqWant []string
}

// oversizedPayload is ~200 KiB: over the real broker's 64 KiB
// message.max.bytes, under --producer-batch-max-bytes (~1 MB), so the broker
// and not the client refuses it. The padding is random: the broker checks
// the compressed batch, and 200 KiB of one letter compresses to 10 KiB.
var oversizedPayload = func() string {
	rng := rand.New(rand.NewPCG(1, 2))
	raw := make([]byte, 150<<10)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	return `{"pad": "` + base64.StdEncoding.EncodeToString(raw) + `"}`
}()

const (
	biMessageMaxBytes = 64 << 10
	// The router's own closing advice under the fail policy.
	routerFix = "set invalid_rows: dead-letter"
)

var badRowCases = []badRowCase{
	{
		name: "null_aggregate_id",
		row:  outboxRow{"order", nil, "OrderPlaced", `{"n": 1}`, `{}`},
		failWant: []string{`invalid outbox row id "{bad}" in public.outbox at LSN`, `column "aggregate_id"`,
			`aggregate id: column "aggregate_id" is NULL`, routerFix},
		dlqWant: []string{`column "aggregate_id" is NULL`},
	},
	{
		name: "null_payload",
		row:  outboxRow{"order", "ord-2", "OrderPlaced", nil, `{}`},
		failWant: []string{`invalid outbox row id "{bad}" in public.outbox at LSN`, `column "payload"`,
			`payload: column "payload" is NULL`, routerFix},
		dlqWant: []string{`column "payload" is NULL`},
	},
	{
		// The same row met in a backlog: walbox reads the first valid row
		// and the bad one together, and must still deliver the first (and
		// confirm it) before it stops, or one bad row holds back every
		// event committed before it.
		name:    "null_payload_in_backlog",
		row:     outboxRow{"order", "ord-2", "OrderPlaced", nil, `{}`},
		backlog: true,
		failWant: []string{`invalid outbox row id "{bad}" in public.outbox at LSN`, `column "payload"`,
			`payload: column "payload" is NULL`, routerFix},
		dlqWant: []string{`column "payload" is NULL`},
	},
	{
		// A double-encoded object, the usual way headers end up not being
		// an object: a JSON string holding JSON.
		name: "headers_not_a_json_object",
		row:  outboxRow{"order", "ord-2", "OrderPlaced", `{"n": 1}`, `"{\"trace\": \"t-2\"}"`},
		failWant: []string{`invalid outbox row id "{bad}" in public.outbox at LSN`, `column "headers"`,
			"is a JSON string, not an object", "must be a JSON object", routerFix},
		dlqWant: []string{`column "headers" is a JSON string, not an object`},
	},
	{
		name: "topic_kafka_rejects",
		row:  outboxRow{"order/v2", "ord-2", "OrderPlaced", `{"n": 1}`, `{}`},
		failWant: []string{`invalid outbox row id "{bad}" in public.outbox at LSN`, `column "aggregate_type"`,
			`rendered "{prefix}.order/v2"`, `topic name contains "/"`, "a-z A-Z 0-9 . _ -", routerFix},
		dlqWant: []string{`rendered "{prefix}.order/v2"`, `contains "/"`},
	},
	{
		name:         "payload_over_max_message_bytes",
		row:          outboxRow{"order", "ord-2", "OrderPlaced", oversizedPayload, `{}`},
		kafkaRefuses: true,
		// With a linger the backlog's three records surely share one
		// batch, as records do under load; without it they mostly do.
		args: []string{"--producer-linger=300ms"},
		failWant: []string{`kafka would refuse event "{bad}"`, `topic "{prefix}.order"`, "MESSAGE_TOO_LARGE",
			"max.message.bytes", "--invalid-rows=dead-letter"},
		// The size that was refused, about 200 KiB, in bytes.
		failMatch: regexp.MustCompile(`\b2\d{5} bytes|bytes=2\d{5}\b`),
		dlqWant:   []string{`the record for topic "{prefix}.order" is too large for Kafka`, "checked before producing", "MESSAGE_TOO_LARGE"},
	},
}

// TestBadInputConfig: configuration mistakes stop walbox with exit code 2
// and one line naming the option, the value and the accepted form.
func TestBadInputConfig(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, c := range startupCases {
		if c.needs != needNothing {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			runStartupCase(t, newBiEnv(ctx, t, nil, nil), c)
		})
	}
}

// TestBadInputServerState: a server walbox cannot use stops it, naming what
// is wrong and how to fix it: exit code 2 for what its preflight refuses,
// 1 for what it meets later (a slot held by another process).
func TestBadInputServerState(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg := pgtest.Start(t)
	brokers := kfakeBrokers(t)
	var replica *pgtest.Server // started only for the case that needs it
	for _, c := range startupCases {
		var srv *pgtest.Server
		switch c.needs {
		case needPostgres:
			srv = pg
		case needWALLevelReplica:
			if replica == nil {
				replica = pgtest.Start(t, pgtest.WithSetting("wal_level", "replica"))
			}
			srv = replica
		default:
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			runStartupCase(t, newBiEnv(ctx, t, srv, brokers), c)
		})
	}
}

// TestBadInputRows: rows the router refuses, under both policies, with
// kfake as the broker.
func TestBadInputRows(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pg := pgtest.Start(t)
	brokers := kfakeBrokers(t)
	for _, rc := range badRowCases {
		if rc.kafkaRefuses {
			continue
		}
		for _, policy := range []string{"fail", "dead-letter"} {
			t.Run(rc.name+"/"+policy, func(t *testing.T) {
				b := brokers
				if rc.backlog {
					// Acks slower than walbox meets the bad row, so the
					// first row is surely still in flight then.
					b = slowKfakeBrokers(t, 500*time.Millisecond)
				}
				runBadRow(ctx, t, newBiEnv(ctx, t, pg, b), rc, policy, false)
			})
		}
	}
}

// slowKfakeBrokers starts a kfake cluster that holds every produce request
// for delay before handling it (fault injection, not synchronisation).
func slowKfakeBrokers(t *testing.T, delay time.Duration) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	c.ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		c.SleepControl(func() { time.Sleep(delay) })
		return nil, nil, false // now let the cluster handle it
	})
	return c.ListenAddrs()
}

// TestBadInputKafka: what only a real broker refuses, on one broker with
// auto.create.topics.enable=false and message.max.bytes=64KiB: a record over
// the size limit under both policies (its topics are created by the test)
// and a topic that does not exist.
func TestBadInputKafka(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	broker := kafkatest.Start(t, kafkatest.WithAutoCreateTopics(false), kafkatest.WithMessageMaxBytes(biMessageMaxBytes))
	if !broker.CanFault() {
		kafkatest.SkipExternal(t, fmt.Sprintf("an external cluster cannot be given auto.create.topics.enable=false and message.max.bytes=%d", biMessageMaxBytes))
	}
	brokers := broker.Addrs()
	pg := pgtest.Start(t)
	for _, rc := range badRowCases {
		if !rc.kafkaRefuses {
			continue
		}
		for _, policy := range []string{"fail", "dead-letter"} {
			t.Run(rc.name+"/"+policy, func(t *testing.T) {
				runBadRow(ctx, t, newBiEnv(ctx, t, pg, brokers), rc, policy, true)
			})
		}
	}
	for _, c := range startupCases {
		if c.needs != needRealBroker {
			continue
		}
		t.Run(c.name, func(t *testing.T) {
			runStartupCase(t, newBiEnv(ctx, t, pg, brokers), c)
		})
	}
}

// runStartupCase starts walbox on the case's setup and checks how it stops.
func runStartupCase(t *testing.T, e *biEnv, c startupCase) {
	t.Helper()
	if c.setup != nil {
		c.setup(t, e)
	}
	var env []string
	if c.needs != needNothing {
		env = e.walboxEnv()
	}
	env = append(env, c.env...)
	timeout := c.timeout
	if timeout == 0 {
		timeout = 60 * time.Second
	}
	start := time.Now()
	res := runWalboxToExit(t, env, e.expandAll(c.args), timeout)
	reason := checkFatal(t, res, c.wantCode, e.expandAll(c.want), c.notWant)
	t.Logf("exit %d after %s: walbox: %s", res.code, time.Since(start).Round(time.Millisecond), reason)
	if c.after != nil {
		c.after(t, e)
	}
}

// runBadRow writes a valid row, the bad row and a valid row, each in its
// own transaction, and checks what walbox does with them under policy.
//
// Normally walbox is streaming and has delivered the first row before the
// bad one is written. A backlog case writes the three rows before walbox
// starts, the situation after any downtime: walbox then reads them
// together, and for a row Kafka refuses they reach the broker in one batch,
// which the broker refuses as a whole; walbox must still single out the bad
// row and deliver the first one.
func runBadRow(ctx context.Context, t *testing.T, e *biEnv, rc badRowCase, policy string, createTopics bool) {
	t.Helper()
	e.exec(t, badInputOutboxDDL)
	e.ensureSlot(t)
	topic, dlq := e.prefix+".order", e.prefix+".dlq"
	if createTopics {
		e.createTopics(ctx, t, topic, dlq)
	}
	args := rc.args
	if policy == "dead-letter" {
		args = append(args[:len(args):len(args)], "--invalid-rows=dead-letter", "--dead-letter-topic="+dlq)
	}
	col := startCollectorPattern(ctx, t, e.brokers, "^"+regexp.QuoteMeta(e.prefix)+`\..+`)

	backlog := rc.kafkaRefuses || rc.backlog
	first := e.insert(t, validRow("ord-1"))
	var p *biProc
	if !backlog {
		p = startWalboxSplit(t, e.walboxEnv(), args...)
		waitUntil(ctx, t, 60*time.Second, "the first valid row to be delivered", func() bool {
			if p.exited() {
				t.Fatalf("walbox exited before the bad row was written: %v\n%s", p.err, p.stderr.Tail(4000))
			}
			return delivered(col, topic, first) > 0
		})
	}
	e.lsnBefore = e.currentLSN(t)
	e.badID = e.insert(t, rc.row)
	after := e.insert(t, validRow("ord-3"))
	lsnEnd := e.currentLSN(t)
	t.Logf("rows: first %s, bad %s, after %s; WAL %s before the bad row, %s after the last", first, e.badID, after, e.lsnBefore, lsnEnd)
	if backlog {
		p = startWalboxSplit(t, e.walboxEnv(), args...)
	}

	if policy == "fail" {
		res := waitExit(t, p, 90*time.Second)
		reason := checkFatal(t, res, 1, e.expandAll(rc.failWant), nil)
		t.Logf("walbox: %s", reason)
		if rc.failMatch != nil && !rc.failMatch.MatchString(reason) {
			t.Errorf("stderr one-liner does not match %s:\n  %s", rc.failMatch, reason)
		}
		lsn := checkLSNIn(t, reason, e.lsnBefore, lsnEnd)
		if c := e.confirmedLSN(t); c > e.lsnBefore {
			t.Errorf("slot confirmed %s, past the bad row's transaction (WAL was at %s before it): the row would be skipped", c, e.lsnBefore)
		}
		e.settle(ctx, t, col)
		if delivered(col, topic, first) == 0 {
			t.Errorf("the first valid row %s, written before the bad one, was not delivered", first)
		}
		if !rc.kafkaRefuses {
			// The loop stops at the bad row, so nothing after it can
			// have been produced. (A row Kafka refuses is only known to
			// be bad once the broker answers, by which time the next row
			// may be in flight: that is no skip, the slot replays both.)
			if n := e.recordCount(ctx, t); n != 1 {
				t.Errorf("%d records on %s.*, want 1 (the first valid row only)", n, e.prefix)
			}
		}
		// Nothing skipped: a restart meets the same row at the same LSN.
		res = runWalboxToExit(t, e.walboxEnv(), args, 90*time.Second)
		reason2 := checkFatal(t, res, 1, e.expandAll(rc.failWant), nil)
		if lsn2 := checkLSNIn(t, reason2, e.lsnBefore, lsnEnd); lsn2 != lsn {
			t.Errorf("after a restart walbox stopped at LSN %s, first at %s; want the same row again", lsn2, lsn)
		}
		if c := e.confirmedLSN(t); c > e.lsnBefore {
			t.Errorf("after the restart the slot confirmed %s, past the bad row's transaction (WAL was at %s before it)", c, e.lsnBefore)
		}
		return
	}

	waitUntil(ctx, t, 60*time.Second, "the slot to confirm past every row", func() bool {
		if p.exited() {
			t.Fatalf("walbox exited under the dead-letter policy: %v\n%s", p.err, p.stderr.Tail(4000))
		}
		return e.confirmedLSN(t) >= lsnEnd
	})
	e.settle(ctx, t, col)
	for _, r := range onTopic(col, dlq) {
		if id := r.Headers["event_id"]; id != e.badID {
			t.Errorf("the valid row %s was dead-lettered instead of delivered to %s; walbox_error: %s", id, topic, r.Headers["walbox_error"])
		}
	}
	for _, id := range []string{first, after} {
		if delivered(col, topic, id) == 0 {
			t.Errorf("the valid row %s was not delivered to %s", id, topic)
		}
	}
	if delivered(col, topic, e.badID) != 0 {
		t.Errorf("the bad row %s reached %s as well", e.badID, topic)
	}
	dead := onTopic(col, dlq)
	if len(dead) != 1 {
		t.Fatalf("%d records on the dead-letter topic %s, want 1 (the bad row)", len(dead), dlq)
	}
	checkDeadLetter(t, e, dead[0], rc, lsnEnd)
	if !hasLogLine(p.stderr.String(), "WARN", e.badID, "dead-letter") {
		t.Errorf("no structured WARN log line names the dead-lettered row %s", e.badID)
	}
	if p.exited() {
		t.Fatalf("walbox exited under the dead-letter policy: %v", p.err)
	}
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

// checkDeadLetter checks the record that replaced the bad row.
func checkDeadLetter(t *testing.T, e *biEnv, r outboxtest.Received, rc badRowCase, lsnEnd pglogrepl.LSN) {
	t.Helper()
	h := r.Headers
	if h["event_id"] != e.badID {
		t.Errorf("dead-letter record event_id %q, want the bad row's id %q", h["event_id"], e.badID)
	}
	for _, w := range e.expandAll(rc.dlqWant) {
		if !strings.Contains(h["walbox_error"], w) {
			t.Errorf("walbox_error %q does not contain %q", h["walbox_error"], w)
		}
	}
	if h["walbox_table"] != "public.outbox" {
		t.Errorf("walbox_table %q, want public.outbox", h["walbox_table"])
	}
	if lsn, err := pglogrepl.ParseLSN(h["walbox_lsn"]); err != nil || lsn < e.lsnBefore || lsn >= lsnEnd {
		t.Errorf("walbox_lsn %q, want an LSN in [%s, %s)", h["walbox_lsn"], e.lsnBefore, lsnEnd)
	}
	if xid, err := strconv.ParseUint(h["walbox_xid"], 10, 32); err != nil || xid == 0 {
		t.Errorf("walbox_xid %q, want the writing transaction's id", h["walbox_xid"])
	}
	if rc.kafkaRefuses {
		if len(r.Value) != 0 {
			t.Errorf("the dead-letter record of a refused oversized record carries a %d-byte value; it would be refused again", len(r.Value))
		}
		if h["walbox_original_topic"] != e.prefix+".order" {
			t.Errorf("walbox_original_topic %q, want %q", h["walbox_original_topic"], e.prefix+".order")
		}
	}
}
