package main

import (
	"context"
	"log/slog"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/pgtest"
)

// During a partial migration another Debezium connector's slot receives
// walbox's heartbeats and emits them as records; walbox said nothing.
func TestWarnHeartbeatListeners(t *testing.T) {
	srv := pgtest.Start(t)
	db := pgtest.NewDatabase(t, srv)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	cfg := config.Config{PGDSN: srv.DSN(db), Slot: db + "_walbox"}
	var logs logbuf.Buffer
	warnHeartbeatListeners(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if logs.String() != "" {
		t.Errorf("warned with no other slot:\n%s", logs.String())
	}
	for _, s := range []string{cfg.Slot, db + "_other_connector"} {
		if _, err := conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", s); err != nil {
			t.Fatal(err)
		}
	}
	warnHeartbeatListeners(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)))
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, db+"_other_connector") ||
		!strings.Contains(out, "message.prefix.exclude.list=walbox_heartbeat") || strings.Contains(out, cfg.Slot+" ") {
		t.Errorf("warning:\n%s", out)
	}
}
