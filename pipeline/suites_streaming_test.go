package pipeline_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
)

// streamTxnRows outbox rows in one transaction exceed the test servers'
// logical_decoding_work_mem (pgtest sets the minimum, 64kB, which about 220
// of outboxtest's rows fill), so the server streams such a transaction to
// walbox before its commit.
const streamTxnRows = 300

// requireStreamed waits until the server reports at least min transactions
// streamed to slot before their commit (pg_stat_replication_slots.stream_txns;
// PostgreSQL 14 reports it asynchronously) and fails t if it never does, so
// that a suite meant to run through streaming cannot silently stop doing so
// (its transactions shrink, or the servers' logical_decoding_work_mem
// grows). It returns the count.
func requireStreamed(t *testing.T, ctx context.Context, srv *pgtest.Server, slot string, min int64) int64 {
	t.Helper()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var txns int64
	deadline := time.Now().Add(30 * time.Second)
	for {
		if err := conn.QueryRow(ctx, `SELECT coalesce((SELECT stream_txns FROM pg_stat_replication_slots WHERE slot_name = $1), 0)`, slot).Scan(&txns); err != nil {
			t.Fatalf("pg_stat_replication_slots of %s: %v", slot, err)
		}
		if txns >= min {
			return txns
		}
		if time.Now().After(deadline) {
			t.Fatalf("the server streamed %d transactions to slot %s (pg_stat_replication_slots.stream_txns), want at least %d: the test no longer covers streaming; does a transaction still exceed logical_decoding_work_mem?", txns, slot, min)
		}
		time.Sleep(100 * time.Millisecond) // polling interval, not synchronisation
	}
}
