package retention_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/retention"
)

// byMajor holds one shared server per PostgreSQL major version for the
// tests that run on every version (pgtest.ForEachVersion); each test
// still works in its own database.
var byMajor struct {
	mu  sync.Mutex
	srv map[int]*pgtest.Shared
}

// sharedFor returns the shared server of version v, starting it on first use.
func sharedFor(t *testing.T, v pgtest.Version) *pgtest.Server {
	t.Helper()
	byMajor.mu.Lock()
	if byMajor.srv == nil {
		byMajor.srv = map[int]*pgtest.Shared{}
	}
	sh, ok := byMajor.srv[v.Major]
	if !ok {
		sh = &pgtest.Shared{Options: pgtest.Options{BinDir: v.BinDir}}
		byMajor.srv[v.Major] = sh
	}
	byMajor.mu.Unlock()
	return sh.Server(t)
}

// closeByMajor closes the per-version servers; TestMain calls it.
func closeByMajor() error {
	byMajor.mu.Lock()
	defer byMajor.mu.Unlock()
	var first error
	for _, sh := range byMajor.srv {
		if err := sh.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// TestEnsureSlotCopiesAFailoverLiveSlot: with --failover-slot (PostgreSQL
// 17+) the live slot is a failover slot; the trailing slot is still a copy
// of it at its confirmed position, and Advance works on the pair.
func TestEnsureSlotCopiesAFailoverLiveSlot(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		if v.Major < 17 {
			t.Logf("nothing to test: failover slots need PostgreSQL 17+, this is %d", v.Major)
			return
		}
		srv := sharedFor(t, v)
		db := pgtest.NewDatabase(t, srv)
		ctx := ctxT(t)
		conn, err := pgx.Connect(ctx, srv.DSN(db))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		e := env{dsn: srv.DSN(db), conn: conn, live: db, tr: db + "_replay"}
		e.exec(t, `CREATE TABLE w (v int)`)
		e.exec(t, `SELECT pg_create_logical_replication_slot('`+e.live+`', 'pgoutput', false, false, true)`)
		confirmed := e.write(t)
		e.confirmLive(t, confirmed)
		info, created, err := retention.EnsureSlot(ctx, conn, e.live, e.tr)
		if err != nil || !created || info.ConfirmedFlushLSN != confirmed {
			t.Fatalf("EnsureSlot from a failover slot: created %t at %s, %v; want a copy at %s", created, info.ConfirmedFlushLSN, err, confirmed)
		}
		next := e.write(t)
		e.confirmLive(t, next)
		if a, err := retention.Advance(ctx, conn, e.live, e.tr, next); err != nil || a.After != next {
			t.Fatalf("Advance: %+v, %v; want to %s", a, err, next)
		}
	})
}
