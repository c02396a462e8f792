package e2e

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestReadyzShowsAStreamHeldBackForAStandby: on PostgreSQL 17+, a primary
// whose synchronized_standby_slots names a standby that does not confirm
// holds every logical change of a failover slot back (its walsender waits
// on WaitForStandbyConfirmation). With Patroni this held walbox for 47 s
// after a crash while /readyz answered 200 "streaming"; it now says
// "degraded" with the standby's slot, and "streaming" again once the slot
// leaves the setting. Before the fix it said "streaming" throughout.
func TestReadyzShowsAStreamHeldBackForAStandby(t *testing.T) {
	vs := pgtest.VersionsFrom(t, 17, "synchronized_standby_slots")
	v := vs[len(vs)-1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{outboxtest.DDL,
		// A standby's physical slot that no standby ever used.
		`SELECT pg_create_physical_replication_slot('m1')`,
		`ALTER SYSTEM SET synchronized_standby_slots = 'm1'`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	port, err := kafkatest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p := startWalbox(t, []string{
		"WALBOX_PG_DSN=" + srv.DSN("postgres"),
		"WALBOX_KAFKA_BROKERS=" + kfakeBrokers(t)[0],
		"WALBOX_FAILOVER_SLOT=true",
		"WALBOX_HEARTBEAT_INTERVAL=200ms",
		"WALBOX_METRICS_ADDR=" + addr,
		"WALBOX_LOG_FORMAT=text",
	})
	readyz := func() string {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return strconv.Itoa(resp.StatusCode) + " " + string(b)
	}
	gen := outboxtest.NewGenerator(26, 3)
	var body string
	waitUntil(ctx, t, time.Minute, "/readyz to say the stream is held back for standby m1", func() bool {
		if p.exited() {
			t.Fatalf("walbox exited: %v", p.err)
		}
		if err := outboxtest.WriteTx(ctx, conn, gen.Batch(1)); err != nil {
			t.Fatal(err)
		}
		body = readyz()
		return strings.HasPrefix(body, "200 degraded:") && strings.Contains(body, "synchronized_standby_slots") && strings.Contains(body, "m1")
	})
	t.Logf("/readyz while held back: %s", strings.TrimSpace(body))
	for _, sql := range []string{`ALTER SYSTEM SET synchronized_standby_slots = ''`, `SELECT pg_reload_conf()`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	waitUntil(ctx, t, time.Minute, "/readyz to say streaming again", func() bool {
		body = readyz()
		return strings.HasPrefix(body, "200 streaming")
	})
}

// TestWarnsOfAStandbyThatCannotSyncTheSlot: on PostgreSQL 17+, a standby
// that holds a slot of walbox's name which is not a synchronized copy (the
// demoted primary after a switchover keeps its own) cannot get one: its
// slot synchronization logs "exiting from slot synchronization because same
// name slot ... already exists on the standby" every 10 s, and a failover
// to it loses walbox's position. With --failover-slot and a multi-host DSN
// walbox warns, naming the standby and the fix; before, nothing did.
func TestWarnsOfAStandbyThatCannotSyncTheSlot(t *testing.T) {
	fulltest.Require(t, "a standby holding an unsynchronized slot of walbox's name")
	vs := pgtest.VersionsFrom(t, 17, "a failover slot")
	v := vs[len(vs)-1]
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
	conn, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{outboxtest.DDL, `SELECT pg_create_physical_replication_slot('sb')`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	conn.Close(ctx)
	standby := pgtest.Standby(t, primary, pgtest.StandbyOptions{PrimarySlotName: "sb",
		Settings: map[string]string{"hot_standby_feedback": "on"}})
	if conn, err = pgx.Connect(ctx, primary.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	// The standby's own slot of walbox's name, as a demoted primary keeps
	// it. Creating a logical slot on a standby waits for the primary to log
	// its running transactions.
	sconn, err := pgx.Connect(ctx, standby.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer sconn.Close(context.Background())
	created := make(chan error, 1)
	go func() {
		_, err := sconn.Exec(ctx, `SELECT pg_create_logical_replication_slot('walbox', 'pgoutput')`)
		created <- err
	}()
	waitUntil(ctx, t, time.Minute, "the standby's own slot", func() bool {
		select {
		case err := <-created:
			if err != nil {
				t.Fatalf("create the slot on the standby: %v", err)
			}
			return true
		default:
			_, _ = conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`)
			return false
		}
	})
	dsn := fmt.Sprintf("host=127.0.0.1,127.0.0.1 port=%d,%d dbname=postgres user=postgres sslmode=disable connect_timeout=2 target_session_attrs=read-write",
		primary.Port(), standby.Port())
	p := startWalbox(t, []string{
		"WALBOX_PG_DSN=" + dsn,
		"WALBOX_KAFKA_BROKERS=" + kfakeBrokers(t)[0],
		"WALBOX_FAILOVER_SLOT=true",
		"WALBOX_METRICS_ADDR=127.0.0.1:0",
		"WALBOX_LOG_FORMAT=text",
	})
	waitUntil(ctx, t, time.Minute, "the warning about the standby's slot", func() bool {
		if p.exited() {
			t.Fatalf("walbox exited: %v", p.err)
		}
		return strings.Contains(p.stderr.String(), "not a synchronized copy of the failover slot")
	})
	line := lastLine(p.stderr.String(), "not a synchronized copy")
	if !strings.Contains(line, fmt.Sprintf("standby=127.0.0.1:%d", standby.Port())) || !strings.Contains(line, "pg_drop_replication_slot('walbox')") {
		t.Fatalf("the warning does not name the standby and the fix:\n%s", line)
	}
}
