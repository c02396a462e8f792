package heartbeat

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
)

func migrate(t *testing.T, conn *pgx.Conn, names ...string) {
	t.Helper()
	for _, n := range names {
		sql, err := migrations.FS.ReadFile(n)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(context.Background(), string(sql)); err != nil {
			t.Fatalf("apply migrations/%s: %v", n, err)
		}
	}
}

// TestHeartbeatFunction, on every version: once migration 004 revoked
// pg_logical_emit_message from PUBLIC, the heartbeat advice used to be
// "GRANT outbox_writer TO walbox", which lets the relay's own credentials
// forge outbox messages, or a GRANT naming pg_logical_emit_message(boolean,
// text, text), which fails on PostgreSQL 17+ (the function gained a fourth
// argument). Now: without migration 005 the error names it and a GRANT that
// succeeds on this version; with 005, walbox's role emits heartbeats through
// the function, which emits nothing but a heartbeat, while it still cannot
// call pg_logical_emit_message itself.
func TestHeartbeatFunction(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		t.Parallel()
		srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		admin, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(context.Background())
		migrate(t, admin, "001_outbox.sql", "002_publication.sql", "003_walbox_role.sql", "004_emit_message_privilege.sql")
		if _, err := admin.Exec(ctx, `SELECT pg_create_logical_replication_slot('walbox', 'test_decoding')`); err != nil {
			t.Fatal(err)
		}
		cc, err := pgx.ParseConfig(srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		cc.User = "walbox"
		conn, err := pgx.ConnectConfig(ctx, cc)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		logs := &logbuf.Buffer{}
		m, err := New(time.Second, "walbox", cc, func() bool { return true }, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(logs, nil)))
		if err != nil {
			t.Fatal(err)
		}

		// Without 005: one error naming the migration and a GRANT of this
		// server's signature.
		if !m.tick(ctx, conn) {
			t.Fatal("tick: connection unusable")
		}
		out := logs.String()
		for _, s := range []string{"005_heartbeat_function.sql", "may not execute pg_logical_emit_message", "--heartbeat-interval=0"} {
			if !strings.Contains(out, s) {
				t.Errorf("log lacks %q:\n%s", s, out)
			}
		}
		grant, err := GrantEmitSQL(ctx, admin, "hb_granted")
		if err != nil {
			t.Fatal(err)
		}
		if want := strings.ReplaceAll(strings.Replace(grant, "hb_granted", "walbox", 1), `"`, `\"`); !strings.Contains(out, want) {
			t.Errorf("log does not give the statement %q for walbox:\n%s", grant, out)
		}
		if _, err := admin.Exec(ctx, `CREATE ROLE hb_granted LOGIN`); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.Exec(ctx, grant); err != nil {
			t.Fatalf("the GRANT walbox prints fails on PostgreSQL %d: %s: %v", v.Major, grant, err)
		}
		granted := connectAs(t, srv, "hb_granted")
		if _, err := granted.Exec(ctx, `SELECT pg_logical_emit_message(true, 'walbox_heartbeat', '{}')`); err != nil {
			t.Errorf("after %s: %v", grant, err)
		}

		// With 005 (twice: idempotent).
		migrate(t, admin, "005_heartbeat_function.sql", "005_heartbeat_function.sql")
		if len(m.outstanding) != 0 {
			t.Fatalf("a denied heartbeat stayed outstanding")
		}
		if !m.tick(ctx, conn) {
			t.Fatal("tick: connection unusable")
		}
		if len(m.outstanding) != 1 {
			t.Fatalf("no heartbeat outstanding after a tick with the function:\n%s", logs.String())
		}
		var prefix, content string
		if err := admin.QueryRow(ctx, `SELECT substring(data from 'prefix: ([^,]*),'), substring(data from 'content: ?(.*)$')
			FROM pg_logical_slot_peek_changes('walbox', NULL, NULL) WHERE data LIKE 'message:%instance%'`).Scan(&prefix, &content); err != nil {
			t.Fatalf("read the heartbeat from the slot: %v", err)
		}
		if prefix != Prefix {
			t.Errorf("prefix %q, want %q", prefix, Prefix)
		}
		m.Seen([]byte(content))
		if m.Received() != 1 {
			t.Errorf("the function's content %s is not recognised as this monitor's heartbeat", content)
		}
		var p payload
		if err := json.Unmarshal([]byte(content), &p); err != nil || p.SentAt <= 0 {
			t.Errorf("content %s: %v, sent_unix_ns %d", content, err, p.SentAt)
		}

		// walbox's role still cannot emit anything else.
		var pgErr *pgconn.PgError
		if _, err := conn.Exec(ctx, `SELECT pg_logical_emit_message(true, 'outbox', '{"id":"forged"}')`); !errorsAs(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("walbox's role emitted a message directly: %v", err)
		}
		if _, err := conn.Exec(ctx, `SELECT public.walbox_heartbeat('", "forged": "1', 1)`); err == nil {
			t.Error("the heartbeat function accepted an instance that is not hex digits")
		}
		intruder := "hb_intruder"
		if _, err := admin.Exec(ctx, `CREATE ROLE hb_intruder LOGIN`); err != nil {
			t.Fatal(err)
		}
		if _, err := connectAs(t, srv, intruder).Exec(ctx, `SELECT public.walbox_heartbeat('ab', 1)`); !errorsAs(err, &pgErr) || pgErr.Code != "42501" {
			t.Errorf("another role executed the heartbeat function: %v", err)
		}
	})
}

func connectAs(t *testing.T, srv *pgtest.Server, role string) *pgx.Conn {
	t.Helper()
	cc, err := pgx.ParseConfig(srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cc.User = role
	conn, err := pgx.ConnectConfig(context.Background(), cc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}
