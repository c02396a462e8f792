package pgtest_test

import (
	"context"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
)

// TestWithPasswordAuth: over TCP a role needs its password, postgres does
// not, and pgtest's own helpers keep working.
func TestWithPasswordAuth(t *testing.T) {
	srv := pgtest.Start(t, pgtest.WithPasswordAuth())
	db := pgtest.NewDatabase(t, srv)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	admin, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatalf("postgres over TCP: %v", err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE ROLE app LOGIN"); err != nil {
		t.Fatal(err)
	}
	as := func(user *url.Userinfo) error {
		u, _ := url.Parse(srv.DSN(db))
		u.User = user
		c, err := pgx.Connect(ctx, u.String())
		if err == nil {
			c.Close(context.Background())
		}
		return err
	}
	if err := as(url.User("app")); err == nil || !strings.Contains(err.Error(), "password authentication failed") {
		t.Errorf("role without a password connected, or failed otherwise: %v", err)
	}
	if _, err := admin.Exec(ctx, "ALTER ROLE app PASSWORD 'pw'"); err != nil {
		t.Fatal(err)
	}
	if err := as(url.UserPassword("app", "pw")); err != nil {
		t.Errorf("with its password: %v", err)
	}
	if err := as(url.UserPassword("app", "wrong")); err == nil {
		t.Error("a wrong password was accepted")
	}
}
