package e2e

import (
	"context"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestSlotCreatedBeforeThePublication: Patroni creates the permanent slot
// of its slots: configuration at bootstrap, before the schema and the
// publication exist, and rows may be written before the publication is
// made. `walbox config check --connect` and `walbox run` then advise
// creating only the publication and moving the slot past it (they used to
// advise a NEW publication with a NEW slot, walbox_2, which under Patroni
// would not even survive a failover); done as advised, walbox streams
// every row written after it.
func TestSlotCreatedBeforeThePublication(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	// As Patroni does at bootstrap, then the application's migration and
	// a first row before anyone thought of the publication.
	for _, sql := range []string{`SELECT pg_create_logical_replication_slot('walbox', 'pgoutput')`, outboxtest.DDL} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	gen := outboxtest.NewGenerator(262, 4)
	if err := outboxtest.WriteTx(ctx, conn, gen.Batch(2)); err != nil {
		t.Fatal(err)
	}
	brokers := kfakeBrokers(t)
	env := []string{"WALBOX_PG_DSN=" + srv.DSN("postgres"), "WALBOX_KAFKA_BROKERS=" + brokers[0], "WALBOX_LOG_FORMAT=text", "WALBOX_METRICS_ADDR=127.0.0.1:0"}

	out := &logbuf.Buffer{}
	check := startWalboxOut(t, env, out, "config", "check", "--connect")
	select {
	case <-check.done:
	case <-time.After(time.Minute):
		t.Fatal("walbox config check --connect did not finish within a minute")
	}
	advice := out.String() + check.stderr.String()
	only, cut := strings.Index(advice, "Create only the publication"), strings.Index(advice, "NEW publication with a NEW slot")
	if only < 0 || (cut >= 0 && cut < only) || !strings.Contains(advice, "Patroni") {
		t.Fatalf("config check --connect, with the slot made before the publication, does not advise creating only the publication first:\n%s", advice)
	}
	run := runWalboxToExit(t, env, nil, time.Minute)
	if run.code == 0 || !strings.Contains(run.stderr, "Create only the publication") {
		t.Fatalf("walbox run exited %d, want a refusal advising to create only the publication:\n%s", run.code, run.stderr)
	}

	// The advice, word for word.
	create := regexp.MustCompile(`CREATE PUBLICATION [^;]+`).FindString(advice)
	advance := regexp.MustCompile(`SELECT pg_replication_slot_advance\([^)]*\)\)`).FindString(advice)
	if create == "" || advance == "" {
		t.Fatalf("the advice names no CREATE PUBLICATION or pg_replication_slot_advance statement:\n%s", advice)
	}
	t.Logf("as advised: %s", create)
	if _, err := conn.Exec(ctx, create); err != nil {
		t.Fatalf("%s: %v", create, err)
	}
	// Without the advance, PostgreSQL 14 to 17 cannot decode the rows
	// written before the publication (18 skips them); shown in the full
	// run (it takes a walbox run to its failure).
	var major int
	if err := conn.QueryRow(ctx, `SELECT current_setting('server_version_num')::int / 10000`).Scan(&major); err != nil {
		t.Fatal(err)
	}
	if major < 18 && fulltest.Enabled() {
		stuck := runWalboxToExit(t, env, nil, time.Minute)
		if stuck.code == 0 || !strings.Contains(stuck.stderr, `publication "walbox" does not exist`) {
			t.Fatalf("walbox run before the advance exited %d, want it to stop on the rows written before the publication:\n%s", stuck.code, stuck.stderr)
		}
	}
	// A live writer commits a row after the publication exists and
	// before the advance: the advance skips it.
	between := gen.Batch(1)
	if err := outboxtest.WriteTx(ctx, conn, between); err != nil {
		t.Fatal(err)
	}
	t.Logf("as advised: %s", advance)
	if _, err := conn.Exec(ctx, advance); err != nil {
		t.Fatalf("%s: %v", advance, err)
	}
	col := startCollector(ctx, t, brokers)
	p := startWalbox(t, env)
	var want []outboxtest.Event
	for i := 0; i < 5; i++ {
		evs := gen.Batch(3)
		if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
			t.Fatal(err)
		}
		want = append(want, evs...)
	}
	waitUntil(ctx, t, time.Minute, "the rows written after the publication", func() bool {
		if p.exited() {
			t.Fatalf("walbox exited: %v", p.err)
		}
		return col.distinct() >= len(want)
	})
	if rep := outboxtest.Check(want, col.snapshot()); !rep.OK() || rep.Delivered != len(want) {
		t.Fatalf("after following the advice: %v", rep)
	}
	// The row committed between the publication and the advance is not
	// streamed: the advice must say so, and say to keep the outbox's
	// writers stopped until the advance returns (it said only that rows
	// committed before the publication existed are not streamed).
	rep := outboxtest.Check(between, col.snapshot())
	t.Logf("the row committed between the publication and the advance: %v", rep)
	if rep.Lost > 0 {
		for _, want := range []string{"stop the outbox's writers", "committed before the advance"} {
			if !strings.Contains(advice, want) {
				t.Errorf("the row committed between CREATE PUBLICATION and the advance was skipped, and the advice does not say %q:\n%s", want, advice)
			}
		}
	}
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox exited %d on SIGTERM", code)
	}
}
