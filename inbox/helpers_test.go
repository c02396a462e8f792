package inbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/pgtest"
)

// shared is the server of the tests; each works in its own database.
var shared pgtest.Shared

func TestMain(m *testing.M) {
	code := m.Run()
	if err := shared.Close(); err != nil {
		println("inbox tests: close shared server:", err.Error())
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// parallel marks t parallel in the short run: the two longest tests (a
// consumer group's rebalance, every PostgreSQL version's subtransaction
// count) mostly wait, and share nothing with the others but the server's
// cluster (each its own database or server). The full run keeps them serial.
func parallel(t *testing.T) { fulltest.Parallel(t) }

// env is one test's database with the inbox migrated and an account table
// whose balance the handlers change.
type env struct {
	dsn string
	ib  *inbox.Inbox
}

func newEnv(t *testing.T, cfg inbox.Config) env {
	t.Helper()
	return newEnvOn(t, shared.Server(t), cfg)
}

// newEnvOn is newEnv in a new database of srv.
func newEnvOn(t *testing.T, srv *pgtest.Server, cfg inbox.Config) env {
	t.Helper()
	dsn := srv.DSN(pgtest.NewDatabase(t, srv))
	ib, err := inbox.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	conn := connect(t, dsn)
	if err := ib.Migrate(ctx(t), conn); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx(t), `CREATE TABLE account (id text PRIMARY KEY, balance bigint NOT NULL, applied int NOT NULL DEFAULT 0);
		INSERT INTO account VALUES ('a', 0, 0)`); err != nil {
		t.Fatal(err)
	}
	return env{dsn: dsn, ib: ib}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

// connect opens a connection closed at the end of the test.
func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx(t), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// record is a Kafka record carrying event id in the event_id header.
func record(id string, offset int64) *kgo.Record {
	return &kgo.Record{
		Topic: "outbox.event.account", Partition: 3, Offset: offset,
		Headers: []kgo.RecordHeader{{Key: "event_type", Value: []byte("Deposited")}, {Key: "event_id", Value: []byte(id)}},
	}
}

// deposit is a handler adding amount to account a and counting the call.
func deposit(amount int64) inbox.HandlerFunc {
	return func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `UPDATE account SET balance = balance + $1, applied = applied + 1 WHERE id = 'a'`, amount)
		return err
	}
}

// account returns account a's balance and the number of handler calls that
// committed.
func account(t *testing.T, conn *pgx.Conn) (balance int64, applied int) {
	t.Helper()
	if err := conn.QueryRow(ctx(t), `SELECT balance, applied FROM account WHERE id = 'a'`).Scan(&balance, &applied); err != nil {
		t.Fatal(err)
	}
	return balance, applied
}

// inboxRows counts the inbox rows of consumer.
func inboxRows(t *testing.T, conn *pgx.Conn, table, consumer string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(ctx(t), fmt.Sprintf(`SELECT count(*) FROM %s WHERE consumer = $1`, table), consumer).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// noop is a handler with no effect.
func noop(context.Context, pgx.Tx) error { return nil }

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
