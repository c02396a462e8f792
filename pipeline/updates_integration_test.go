package pipeline_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/pipeline"
)

// TestRelayOutboxUpdatePolicy: an UPDATE of the outbox is never an event;
// under warn (and error) it is counted and skipped and the rows around it
// flow, under fatal the relay stops before confirming the update's
// transaction, so a restart meets it again (Debezium's
// table.op.invalid.behavior). Before the decoder named the updated
// relation, every update was dropped without a trace.
func TestRelayOutboxUpdatePolicy(t *testing.T) {
	parallel(t)
	insert := `INSERT INTO outbox (aggregate_type, aggregate_id, event_type, payload) VALUES ('order', $1, 'created', '{}')`
	for _, policy := range []string{pipeline.OutboxUpdatesWarn, pipeline.OutboxUpdatesFatal} {
		t.Run(policy, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			e := startEnvWith(t, 50*time.Millisecond, func(c *pipeline.Config) { c.OutboxUpdates = policy })
			// walbox publishes inserts only; Debezium's publications (which
			// Debezium mode runs on) publish updates too.
			if _, err := e.conn.Exec(ctx, `ALTER PUBLICATION walbox SET (publish = 'insert, update')`); err != nil {
				t.Fatal(err)
			}
			if _, err := e.conn.Exec(ctx, insert, "a"); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 30*time.Second, "the first event", func() bool {
				return metricValue(t, e.reg, "walbox_events_produced_total") == 1
			})
			var beforeUpdate pglogrepl.LSN
			if err := e.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&beforeUpdate); err != nil {
				t.Fatal(err)
			}
			if _, err := e.conn.Exec(ctx, `UPDATE outbox SET payload = '{"fixed":true}' WHERE aggregate_id = 'a'`); err != nil {
				t.Fatal(err)
			}
			if _, err := e.conn.Exec(ctx, insert, "b"); err != nil {
				t.Fatal(err)
			}
			if policy == pipeline.OutboxUpdatesFatal {
				select {
				case err := <-e.done:
					if !errors.Is(err, pipeline.ErrOutboxUpdate) {
						t.Fatalf("relay returned %v, want ErrOutboxUpdate", err)
					}
				case <-ctx.Done():
					t.Fatal("relay kept running after an outbox update under fatal")
				}
				if got := e.confirmedFlush(t); got > beforeUpdate {
					t.Errorf("slot confirmed %s, past the update (WAL was at %s before it)", got, beforeUpdate)
				}
				if got := metricValue(t, e.reg, "walbox_events_produced_total"); got != 1 {
					t.Errorf("%v events produced; the insert after the update must wait", got)
				}
			} else {
				waitFor(t, 30*time.Second, "the event after the update", func() bool {
					return metricValue(t, e.reg, "walbox_events_produced_total") == 2
				})
			}
			if got := metricValue(t, e.reg, "walbox_outbox_updates_total"); got != 1 {
				t.Errorf("walbox_outbox_updates_total = %v, want 1", got)
			}
		})
	}
}
