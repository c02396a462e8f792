package e2e

import (
	"context"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
	installed, err := pgtest.InstalledVersions()
	if err != nil {
		t.Skipf("no PostgreSQL installed: %v", err)
	}
	var v pgtest.Version
	for _, iv := range installed {
		if iv.Major >= 17 {
			v = iv
		}
	}
	if v.Major == 0 {
		t.Skip("synchronized_standby_slots needs PostgreSQL 17 or newer; none is installed")
	}
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
