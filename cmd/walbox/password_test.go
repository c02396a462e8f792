package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
)

// TestRunRoleWithoutPassword: `walbox run` as the role of
// 003_walbox_role.sql, which has no password, against a server that asks
// for one and has no TLS, with a DSN without sslmode (pgx's default,
// prefer, tries TLS first, then plaintext).
//
// Regression (issue 15): walbox printed both of pgx's attempts, a spurious
// "tls error: server refused TLS connection" before the real cause, and no
// word on the fix. Now the one line names the cause and what to do.
func TestRunRoleWithoutPassword(t *testing.T) {
	srv := pgtest.Start(t, pgtest.WithPasswordAuth())
	db := pgtest.NewDatabase(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, f := range []string{"001_outbox.sql", "002_publication.sql", "003_walbox_role.sql"} {
		sql, err := migrations.FS.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()

	env := map[string]string{
		"WALBOX_PG_DSN":        fmt.Sprintf("postgres://walbox@127.0.0.1:%d/%s", srv.Port(), db),
		"WALBOX_KAFKA_BROKERS": strings.Join(cluster.ListenAddrs(), ","),
		"WALBOX_METRICS_ADDR":  "127.0.0.1:0",
	}
	var stdout, stderr strings.Builder
	code := mainCode([]string{"run"}, func(k string) string { return env[k] }, &stdout, &stderr)
	t.Logf("exit %d, stderr:\n%s", code, stderr.String())
	if code != exitFatal {
		t.Errorf("exit code %d, want %d", code, exitFatal)
	}
	var fatal string
	for _, l := range strings.Split(stderr.String(), "\n") {
		if strings.HasPrefix(l, "walbox: ") {
			fatal = l
		}
	}
	for _, s := range []string{`password authentication failed for user "walbox"`, "the DSN gives no password for role walbox",
		"ALTER ROLE walbox PASSWORD", "migrations/003_walbox_role.sql"} {
		if !strings.Contains(fatal, s) {
			t.Errorf("the fatal line lacks %q: %q", s, fatal)
		}
	}
	if strings.Contains(fatal, "TLS") {
		t.Errorf("the fatal line names the TLS attempt, which is not the cause: %q", fatal)
	}
}
