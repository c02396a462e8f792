package heartbeat

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/walbox/walbox/internal/pgtest"
)

// TestSlotWALStatus: every tick reads the live slot's wal_status into
// walbox_slot_wal_status (the alert WalboxSlotWALNotReserved watches it),
// and a missing slot shows as no status at all. On every version: the
// tick's query reads settings and views that differ between them.
func TestSlotWALStatus(t *testing.T) {
	pgtest.ForEachVersion(t, testSlotWALStatus)
}

func testSlotWALStatus(t *testing.T, v pgtest.Version) {
	srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	reg := prometheus.NewRegistry()
	m, err := New(time.Second, "walbox", nil, func() bool { return false }, reg, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	want := func(reserved int) string {
		return `
# HELP walbox_slot_wal_status The slot's pg_replication_slots.wal_status, read every --heartbeat-interval: 1 for the current one, 0 for the others; all 0 until read and while the slot is missing.
# TYPE walbox_slot_wal_status gauge
walbox_slot_wal_status{status="extended"} 0
walbox_slot_wal_status{status="lost"} 0
walbox_slot_wal_status{status="reserved"} ` + string(rune('0'+reserved)) + `
walbox_slot_wal_status{status="unreserved"} 0
`
	}
	if !m.tick(ctx, conn) {
		t.Fatal("tick without the slot: connection unusable")
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(0)), "walbox_slot_wal_status"); err != nil {
		t.Errorf("no slot: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('walbox', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
	if !m.tick(ctx, conn) {
		t.Fatal("tick: connection unusable")
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want(1)), "walbox_slot_wal_status"); err != nil {
		t.Errorf("a fresh slot: %v", err)
	}
}
