package config

import (
	"strings"
	"testing"
)

// A DSN without sslmode gets pgx's default, prefer: TLS if the server
// offers it, with no certificate check, else plaintext; anyone on the
// path can downgrade the connection or impersonate the server. walbox
// said nothing.
func TestPGTransportWarning(t *testing.T) {
	tests := []struct {
		dsn, pgsslmode string
		want           bool
	}{
		{dsn: "postgres://walbox:pw@db:5432/app", want: true},
		{dsn: "host=db user=walbox dbname=app", want: true},
		{dsn: "postgres://walbox:pw@db:5432/app?sslmode=verify-full&sslrootcert=/ca.pem"},
		{dsn: "host=db user=walbox dbname=app sslmode=require"},
		{dsn: "host=db user=walbox sslmode = disable dbname=app"},
		{dsn: "host=db user=walbox dbname=app", pgsslmode: "verify-full"},
		{dsn: "host=/var/run/postgresql user=walbox dbname=app"}, // a Unix socket
		{dsn: "postgres://walbox@%2Fvar%2Frun%2Fpostgresql/app"},
		{dsn: "host=db user=walbox password=sslmode=x dbname=app", want: true},
	}
	for _, tt := range tests {
		got := pgTransportWarning(tt.dsn, func(k string) string {
			if k == "PGSSLMODE" {
				return tt.pgsslmode
			}
			return ""
		})
		if (got != "") != tt.want {
			t.Errorf("%s (PGSSLMODE %q): %q, want warning %t", tt.dsn, tt.pgsslmode, got, tt.want)
		}
		if got != "" && (!strings.Contains(got, "sslmode=verify-full") || strings.Contains(got, "pw")) {
			t.Errorf("%s: %q", tt.dsn, got)
		}
	}
}

// A DSN given explicitly replaces the one built from Debezium's database.*
// keys whole: one that drops its sslmode=verify-full gets a warning.
func TestPGTransportWarningDebeziumDowngrade(t *testing.T) {
	c := Config{PGDSN: "host=db user=walbox dbname=app sslmode=require"}
	ws := c.TransportWarnings(func(string) string { return "" }, "host=db user=dbz dbname=app sslmode=verify-full sslrootcert=/ca.pem")
	if len(ws) != 1 || !strings.Contains(ws[0], "verify-full") || !strings.Contains(ws[0], "require") {
		t.Errorf("warnings %q", ws)
	}
	if ws := c.TransportWarnings(func(string) string { return "" }, "host=db user=dbz dbname=app sslmode=require"); len(ws) != 0 {
		t.Errorf("same mode: %q", ws)
	}
}
