package connerr_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/walbox/walbox/internal/connerr"
)

// fakeServer listens on loopback as a PostgreSQL server without TLS that
// answers every startup with the error resp: enough for pgconn to fail the
// way it does against a real one.
func fakeServer(t *testing.T, resp *pgproto3.ErrorResponse) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				be := pgproto3.NewBackend(c, c)
				for {
					msg, err := be.ReceiveStartupMessage()
					if err != nil {
						return
					}
					switch msg.(type) {
					case *pgproto3.SSLRequest, *pgproto3.GSSEncRequest:
						if _, err := c.Write([]byte{'N'}); err != nil {
							return
						}
					case *pgproto3.StartupMessage:
						be.Send(resp)
						_ = be.Flush()
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// connectErr is the error of connecting to addr with the DSN's parameters.
func connectErr(t *testing.T, addr, userinfo, params string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dsn := fmt.Sprintf("postgres://%s@%s/app", userinfo, addr)
	if params != "" {
		dsn += "?" + params
	}
	c, err := pgconn.Connect(ctx, dsn)
	if err == nil {
		c.Close(ctx)
		t.Fatal("connected to the fake server")
	}
	return fmt.Errorf("slotctl: connect to postgres: %w", err)
}

var (
	badPassword = &pgproto3.ErrorResponse{Severity: "FATAL", Code: "28P01", Message: `password authentication failed for user "walbox"`}
	noDatabase  = &pgproto3.ErrorResponse{Severity: "FATAL", Code: "3D000", Message: `database "app" does not exist`}
)

func TestDescribe(t *testing.T) {
	auth := fakeServer(t, badPassword)
	nodb := fakeServer(t, noDatabase)
	tests := []struct {
		name     string
		addr     string
		userinfo string
		params   string // of the DSN
		want     []string
		not      []string
	}{
		{name: "prefer, no password: only the cause, and the fix", addr: auth, userinfo: "walbox",
			want: []string{"slotctl: connect to postgres: failed to connect to `user=walbox database=app`: ",
				`password authentication failed for user "walbox" (SQLSTATE 28P01)`,
				"the DSN gives no password for role walbox", "ALTER ROLE walbox PASSWORD", "passfile="},
			not: []string{"TLS", "\n"}},
		{name: "prefer, wrong password", addr: auth, userinfo: "walbox:hunter22",
			want: []string{"password authentication failed", "check the password for role walbox"},
			not:  []string{"TLS", "hunter22", "gives no password"}},
		{name: "a role that must be quoted", addr: auth, userinfo: "Walbox",
			want: []string{`ALTER ROLE "Walbox" PASSWORD`, "postgres://Walbox:PASSWORD@"}},
		{name: "prefer, another cause: no password hint", addr: nodb, userinfo: "walbox",
			want: []string{`database "app" does not exist (SQLSTATE 3D000)`}, not: []string{"TLS", "password"}},
		{name: "disable: unchanged", addr: auth, userinfo: "walbox", params: "sslmode=disable",
			want: []string{"28P01", "ALTER ROLE walbox"}, not: []string{"TLS"}},
		{name: "require: the refused TLS is the cause", addr: auth, userinfo: "walbox", params: "sslmode=require",
			want: []string{"tls error: server refused TLS connection"}, not: []string{"28P01", "ALTER ROLE"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := connectErr(t, tt.addr, tt.userinfo, tt.params)
			got := connerr.Describe(err)
			t.Logf("pgconn: %v\nDescribe: %s", err, got)
			for _, s := range tt.want {
				if !strings.Contains(got, s) {
					t.Errorf("Describe() lacks %q", s)
				}
			}
			for _, s := range tt.not {
				if strings.Contains(got, s) {
					t.Errorf("Describe() contains %q", s)
				}
			}
		})
	}
}

// TestDescribeSeveralServers: with several hosts, each server's refused
// TLS attempt goes and each server's real cause stays.
func TestDescribeSeveralServers(t *testing.T) {
	busy := fakeServer(t, &pgproto3.ErrorResponse{Severity: "FATAL", Code: "53300", Message: "sorry, too many clients already"})
	auth := fakeServer(t, badPassword)
	_, p1, _ := net.SplitHostPort(busy)
	_, p2, _ := net.SplitHostPort(auth)
	err := connectErr(t, "127.0.0.1:"+p1+",127.0.0.1:"+p2, "walbox", "")
	got := connerr.Describe(err)
	t.Logf("pgconn: %v\nDescribe: %s", err, got)
	if strings.Contains(got, "TLS") || strings.Count(got, "53300") != 1 || strings.Count(got, "28P01") != 1 ||
		!strings.Contains(got, ":\n\t127.0.0.1:"+p1) {
		t.Errorf("Describe() = %s; want both servers' causes, one a line, and no TLS attempt", got)
	}
}

func TestDescribeOtherErrors(t *testing.T) {
	if got := connerr.Describe(errors.New("a\nb")); got != "a\nb" {
		t.Errorf("Describe(plain error) = %q", got)
	}
	if got := connerr.Describe(nil); got != "" {
		t.Errorf("Describe(nil) = %q", got)
	}
}
