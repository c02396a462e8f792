package pipeline_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/pipeline"
)

// TestRelayStopsOnTimestampTooOld: every record's timestamp is its row's
// commit time, so a topic with message.timestamp.before.max.ms (or, before
// Kafka 4.0, message.timestamp.difference.max.ms) refuses the rows of a
// walbox that lags, or replays, by more than that: INVALID_TIMESTAMP. The
// relay must stop (nothing lost: the slot is not confirmed past the row),
// with an error that names the topic setting and the fixes, in both
// delivery modes.
//
// How it broke: the error ended in "check the broker logs", though the
// broker logs nothing about it.
func TestRelayStopsOnTimestampTooOld(t *testing.T) {
	fulltest.Require(t, "a real broker of its own (about 25 s); the topic setting is not enforced by kfake")
	b := kafkatest.Start(t)
	for _, delivery := range []string{pipeline.DeliveryAtLeastOnce, pipeline.DeliveryExactlyOnce} {
		t.Run(delivery, func(t *testing.T) {
			aggType := "ts" + strconv.FormatInt(time.Now().UnixNano(), 36)
			topic := "outbox.event." + aggType
			var run func() error
			var e *env
			if delivery == pipeline.DeliveryAtLeastOnce {
				e = startEnvKafka(t, b.Addrs(), outboxtest.DDL, 200*time.Millisecond, nil)
				run = func() error { return <-e.done }
			} else {
				e = startEnvKafka(t, b.Addrs(), outboxtest.DDL, 200*time.Millisecond, nil)
				// The at-least-once relay above is not given any row
				// of this topic: stop it and run an exactly-once one.
				e.cancel()
				if err := <-e.done; err != nil {
					t.Fatal(err)
				}
				r := startEOSRelay(t, e.conn, e.srv.DSN("postgres"), b.Addrs(), "walbox", "walbox.state."+aggType, nil)
				run = func() error { return <-r.done }
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			// 1 ms: every row is older than that when it reaches the
			// broker, as a row of a lagging walbox is older than a
			// production setting of minutes or hours.
			limit := "1"
			if _, err := newAdmin(t, b.Addrs()).CreateTopic(ctx, 1, 1, map[string]*string{"message.timestamp.before.max.ms": &limit}, topic); err != nil {
				t.Fatal(err)
			}
			evs := outboxtest.NewGenerator(1, 1, "created").Batch(3)
			for i := range evs {
				evs[i].AggregateType = aggType
			}
			if err := outboxtest.WriteTx(ctx, e.conn, evs); err != nil {
				t.Fatal(err)
			}
			errc := make(chan error, 1)
			go func() { errc <- run() }()
			var runErr error
			select {
			case runErr = <-errc:
			case <-ctx.Done():
				t.Fatal("the relay did not stop at the refused record")
			}
			t.Logf("relay stopped: %v", runErr)
			for _, want := range []string{topic, "message.timestamp.before.max.ms", "commit time"} {
				if runErr == nil || !strings.Contains(runErr.Error(), want) {
					t.Errorf("error %v does not name %q", runErr, want)
				}
			}
			// Nothing lost: the slot still holds the refused rows.
			var n int
			waitFor(t, time.Minute, "the slot to be released", func() bool {
				var active bool
				_ = e.conn.QueryRow(ctx, `SELECT active FROM pg_replication_slots WHERE slot_name = 'walbox'`).Scan(&active)
				return !active
			})
			if err := e.conn.QueryRow(ctx, `SELECT count(*) FROM pg_logical_slot_peek_binary_changes('walbox', NULL, NULL, 'proto_version', '1', 'publication_names', 'walbox')`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n < 5 { // BEGIN, RELATION, 3 INSERTs, COMMIT
				t.Fatalf("the slot holds %d messages, want the refused transaction's (confirmed_flush_lsn %s)", n, e.confirmedFlush(t))
			}
		})
	}
}
