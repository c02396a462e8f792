package e2e

import (
	"context"
	"net/url"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/certtest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/pgtest"
)

// TestPostgresTLS: Postgres with ssl=on and a hostssl-only pg_hba.conf
// that also requires a client certificate (clientcert=verify-full); the
// walbox binary connects with sslmode=verify-full, sslrootcert, sslcert and
// sslkey (certificates made here with crypto/x509) and delivers. The same
// server refuses a connection without TLS and one that does not trust its
// certificate, so the test proves TLS is used, not just passed through.
func TestPostgresTLS(t *testing.T) {
	parallel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	ca := certtest.NewCA(t, "pg")
	srv := ca.Server(t, "localhost", "127.0.0.1")
	client := ca.Client(t, "postgres")
	pg := pgtest.Start(t, pgtest.WithTLS(pgtest.TLS{CertFile: srv.CertFile, KeyFile: srv.KeyFile, ClientCAFile: ca.CertFile}))
	db := pgtest.NewDatabase(t, pg)
	dsn := pg.TLSDSN(db, "localhost", ca.CertFile) + "&" + url.Values{"sslcert": {client.CertFile}, "sslkey": {client.KeyFile}}.Encode()

	refused := func(what, dsn string) {
		t.Helper()
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		defer ccancel()
		conn, err := pgx.Connect(cctx, dsn)
		if err == nil {
			conn.Close(ctx)
			t.Errorf("%s: connected, want it refused", what)
			return
		}
		t.Logf("%s: refused: %v", what, err)
	}
	refused("no TLS", pg.DSN(db))
	refused("untrusted server certificate", pg.TLSDSN(db, "localhost", certtest.NewCA(t, "other").CertFile)+"&"+url.Values{"sslcert": {client.CertFile}, "sslkey": {client.KeyFile}}.Encode())
	refused("no client certificate", pg.TLSDSN(db, "localhost", ca.CertFile))

	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("verify-full with a client certificate: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	var ssl bool
	if err := conn.QueryRow(ctx, `SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()`).Scan(&ssl); err != nil || !ssl {
		t.Fatalf("pg_stat_ssl.ssl = %v (%v), want true", ssl, err)
	}

	broker := kafkatest.Start(t)
	n := biSeq.Add(1)
	e := &biEnv{db: db, dsn: dsn, conn: conn, brokers: broker.Addrs(), ctx: ctx, dir: t.TempDir()}
	e.slot, e.prefix = "pgtls_"+itoa(n), "pgtls."+itoa(n)
	e.exec(t, badInputOutboxDDL)
	e.ensureSlot(t)
	col := startCollectorPattern(ctx, t, e.brokers, "^"+regexp.QuoteMeta(e.prefix)+`\..+`)
	id := e.insert(t, validRow("ord-1"))
	p := startWalboxSplit(t, e.walboxEnv())
	waitUntil(ctx, t, 90*time.Second, "the row to be delivered by walbox connected with verify-full", func() bool {
		if p.exited() {
			t.Fatalf("walbox exited: %v\n%s", p.err, p.stderr.Tail(4000))
		}
		return delivered(col, e.prefix+".order", id) > 0
	})
	var walsenderSSL bool
	if err := conn.QueryRow(ctx, `SELECT bool_and(s.ssl) FROM pg_stat_ssl s JOIN pg_stat_replication r USING (pid)`).Scan(&walsenderSSL); err != nil || !walsenderSSL {
		t.Errorf("walbox's replication connection uses TLS = %v (%v), want true", walsenderSSL, err)
	}
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("exit code %d after SIGTERM, want 0", code)
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
