package main

import (
	"bytes"
	"context"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/migrations"
)

func runConfigCheck(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = mainCode(append([]string{"config", "check"}, args...), func(k string) string { return env[k] }, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestConfigCheckOffline(t *testing.T) {
	const secret = "hunter2-very-secret"
	dsn := "postgres://walbox:" + secret + "@db:5432/app"
	tests := []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
		want     []string // substrings of stdout
	}{
		{
			name:     "valid",
			env:      map[string]string{"WALBOX_PG_DSN": dsn},
			args:     []string{"--kafka-brokers", "k1:9092"},
			wantCode: exitOK,
			want:     []string{"WALBOX_PG_DSN", "--kafka-brokers", "OK: no problems found"},
		},
		{
			name:     "every problem listed",
			args:     []string{"--pg-dsn", dsn, "--status-interval", "soon", "--max-inflight-records", "-1"},
			wantCode: exitUsage,
			want:     []string{"problem(s):", "--status-interval", "--max-inflight-records", "missing --kafka-brokers"},
		},
		{
			name:     "connect skipped on problems",
			args:     []string{"--pg-dsn", dsn, "--connect"},
			wantCode: exitUsage,
			want:     []string{"Connection checks skipped", "missing --kafka-brokers"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runConfigCheck(t, tt.env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d\n%s%s", code, tt.wantCode, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("output contains the password:\n%s%s", out, errOut)
			}
		})
	}
}

func TestConfigCheckUnknownFlag(t *testing.T) {
	code, _, errOut := runConfigCheck(t, nil, "--kafka-broker", "x:1")
	if code != exitUsage || !strings.Contains(errOut, "did you mean --kafka-brokers") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestConfigCheckConnect runs --connect against a real Postgres and kfake:
// a good configuration passes; a role without REPLICATION and a broker
// address nobody listens on are both listed as problems.
func TestConfigCheckConnect(t *testing.T) {
	srv, db, conn := outboxDatabase(t)
	const secret = "norepl-s3cret-pw"
	for _, q := range []string{
		`CREATE ROLE walbox_norepl LOGIN PASSWORD '` + secret + `'`,
		`GRANT SELECT ON public.outbox TO walbox_norepl`,
	} {
		if _, err := conn.Exec(ctxT(t), q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	good := cluster.ListenAddrs()[0]
	bad := closedAddr(t)

	u, err := url.Parse(srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword("walbox_norepl", secret)
	noRepl := u.String()
	u.Host = closedAddr(t)
	noServer := u.String()

	tests := []struct {
		name     string
		dsn      string
		broker   string
		wantCode int
		want     []string
	}{
		{"good", srv.DSN(db), good, exitOK, []string{"wal_level=logical", "replication privilege=true", "outbox table public.outbox found", "kafka: cluster", "OK: no problems found"}},
		// Two: the role lacks REPLICATION, and as it does not own the
		// table it could not create the publication either.
		{"role without replication", noRepl, good, exitUsage, []string{"replication privilege=false", "2 problem(s)", "REPLICATION", "not allowed to manage the publication"}},
		{"bad broker", srv.DSN(db), bad, exitUsage, []string{"1 problem(s)", "kafka: metadata request to --kafka-brokers " + bad}},
		{"no postgres", noServer, good, exitUsage, []string{"1 problem(s)", "postgres: cannot connect with --pg-dsn"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runConfigCheck(t, nil, "--connect", "--connect-timeout", "3s",
				"--pg-dsn", tt.dsn, "--kafka-brokers", tt.broker)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d\n%s%s", code, tt.wantCode, out, errOut)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("stdout lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("output contains the password:\n%s%s", out, errOut)
			}
		})
	}
}

// TestConfigCheckConnectUsesKafkaSecurity: --connect reaches Kafka with
// the same TLS/SASL settings walbox run uses (config.KafkaConfig), so a
// cluster that needs SCRAM passes with the credentials and fails without.
func TestConfigCheckConnectUsesKafkaSecurity(t *testing.T) {
	srv, db, _ := outboxDatabase(t)
	const password = "kafka-scram-pw-7781"
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "walbox", password))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	pwFile := filepath.Join(t.TempDir(), "kafka-password")
	if err := os.WriteFile(pwFile, []byte(password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"--connect", "--connect-timeout", "3s", "--pg-dsn", srv.DSN(db), "--kafka-brokers", cluster.ListenAddrs()[0]}

	code, out, errOut := runConfigCheck(t, nil, append(base,
		"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", "walbox", "--kafka-sasl-password-file", pwFile)...)
	if code != exitOK || !strings.Contains(out, "kafka: cluster") {
		t.Errorf("with SCRAM credentials: exit %d, want 0\n%s%s", code, out, errOut)
	}
	if strings.Contains(out+errOut, password) {
		t.Errorf("output contains the Kafka password:\n%s%s", out, errOut)
	}
	if code, out, errOut := runConfigCheck(t, nil, base...); code != exitUsage || !strings.Contains(out, "kafka:") {
		t.Errorf("without credentials: exit %d, want %d with a Kafka problem\n%s%s", code, exitUsage, out, errOut)
	}
}

// closedAddr is a local address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

func TestConfigCheckHelp(t *testing.T) {
	code, out, _ := runConfigCheck(t, nil, "--help")
	if code != exitOK || !strings.Contains(out, "--connect") || !strings.Contains(out, "Exit status") {
		t.Errorf("exit %d, stdout:\n%s", code, out)
	}
	var stdout, stderr bytes.Buffer
	if code := mainCode([]string{"config"}, nil, &stdout, &stderr); code != exitUsage || !strings.Contains(stderr.String(), "walbox config check") {
		t.Errorf("walbox config: exit %d, stderr %q", code, stderr.String())
	}
}

// TestConfigCheckRedactsKafkaPassword: the SASL password, given as a flag
// or in the environment, never appears in config check's output, valid or
// not (issue 9: no secret in `config check` output).
func TestConfigCheckRedactsKafkaPassword(t *testing.T) {
	const secret = "KafS3cret-config-check"
	base := []string{"--pg-dsn", "postgres://walbox@db:5432/app", "--kafka-brokers", "kafka:9092",
		"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-username", "walbox"}
	for _, tt := range []struct {
		name     string
		env      map[string]string
		args     []string
		wantCode int
	}{
		{"flag, valid", nil, append(slices.Clone(base), "--kafka-sasl-password", secret), exitOK},
		{"env, valid", map[string]string{"WALBOX_KAFKA_SASL_PASSWORD": secret}, base, exitOK},
		{"flag, invalid elsewhere", nil, append(slices.Clone(base), "--kafka-sasl-password", secret, "--slot", "Bad-Slot"), exitUsage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := runConfigCheck(t, tt.env, tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d\n%s%s", code, tt.wantCode, out, errOut)
			}
			if !strings.Contains(out, "--kafka-sasl-password") {
				t.Errorf("the password option is not listed:\n%s", out)
			}
			if strings.Contains(out+errOut, secret) {
				t.Errorf("output contains the Kafka password:\n%s%s", out, errOut)
			}
		})
	}
}

// outboxDatabase is a new database on a test server with the outbox table
// of migrations/001, and a connection to it.
func outboxDatabase(t *testing.T) (*pgtest.Server, string, *pgx.Conn) {
	t.Helper()
	srv := pgtest.Start(t)
	db := pgtest.NewDatabase(t, srv)
	conn, err := pgx.Connect(ctxT(t), srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	sql, err := migrations.FS.ReadFile("001_outbox.sql")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctxT(t), string(sql)); err != nil {
		t.Fatal(err)
	}
	return srv, db, conn
}
