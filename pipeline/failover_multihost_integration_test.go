package pipeline_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/heartbeat"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/slotctl"
)

// TestLagAndRetentionConnectionsFollowAMultiHostDSN: besides the
// replication connection and the heartbeats, walbox opens ordinary
// connections for the slot's lag (the heartbeat monitor's
// pg_replication_slots read) and for the trailing replay slot
// (--replay-window). With libpq's multi-host form listing the standby
// first, target_session_attrs=read-write must bring each of them to the
// primary: on the standby the slot does not exist (lag -1) and the
// trailing slot cannot be created.
func TestLagAndRetentionConnectionsFollowAMultiHostDSN(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary := pgtest.Start(t)
	conn, err := pgx.Connect(ctx, primary.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	for _, sql := range []string{outboxtest.DDL, `SELECT pg_create_physical_replication_slot('standby')`} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	conn.Close(ctx)
	standby := pgtest.Standby(t, primary, pgtest.StandbyOptions{PrimarySlotName: "standby"})
	if conn, err = pgx.Connect(ctx, primary.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	slot, err := slotctl.EnsureSlot(ctx, conn, scfg)
	if err != nil {
		t.Fatal(err)
	}

	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2&target_session_attrs=read-write",
		standby.Port(), primary.Port())
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	log := testLogger(t)
	mon, err := heartbeat.New(100*time.Millisecond, "walbox", cc, func() bool { return false }, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	confirmed := pglogrepl.LSN(slot.ConfirmedFlushLSN)
	keeper, err := retention.New(retention.Config{Slot: "walbox", ReplaySlot: "walbox_replay", Window: time.Hour, Publication: "walbox"},
		cc.Copy(), func() pglogrepl.LSN { return confirmed }, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithCancel(ctx)
	done := make(chan error, 2)
	go func() { done <- mon.Run(rctx) }()
	go func() { done <- keeper.Run(rctx) }()
	defer func() {
		rcancel()
		for range 2 {
			if err := <-done; err != nil && ctx.Err() == nil {
				t.Errorf("monitor or keeper: %v", err)
			}
		}
	}()

	waitFor(t, time.Minute, "the slot's lag read on the primary", func() bool {
		return metricValue(t, reg, "walbox_slot_lag_bytes") >= 0
	})
	waitFor(t, time.Minute, "the trailing slot on the primary", func() bool {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'walbox_replay'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	sc, err := pgx.Connect(ctx, standby.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close(context.Background())
	var onStandby int
	if err := sc.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'`).Scan(&onStandby); err != nil {
		t.Fatal(err)
	}
	if onStandby != 0 {
		t.Fatalf("the standby holds %d logical slots, want none: a connection went to the first host", onStandby)
	}
}
