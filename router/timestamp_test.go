package router

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
)

// TestRecordTimestampIsCommitTime: every record tells its row's commit
// time as its Kafka timestamp. walbox used to leave the timestamp unset, so
// the producer stamped the moment it was handed the record: while walbox
// lagged, that was long after the commit, and the failover runbook, which
// starts from the timestamp of the newest event received, skipped the rows
// committed in between (205 of 750 rows lost with a 75 s lag).
func TestRecordTimestampIsCommitTime(t *testing.T) {
	commit := time.Date(2026, 3, 4, 5, 6, 7, 891234000, time.UTC) // microseconds, as Postgres sends
	rel := classicRel()
	tests := []struct {
		name     string
		cfg      Config
		override map[string]decoder.Value
		dead     bool
	}{
		{name: "routed row", cfg: Config{}},
		{name: "dead-lettered row", cfg: Config{InvalidRows: PolicyDeadLetter, DeadLetterTopic: "outbox.dlq"},
			override: map[string]decoder.Value{"aggregate_id": null}, dead: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ins := classicRow(rel, tt.override)
			ins.CommitTime = commit
			got, err := mustNew(t, tt.cfg).Route(ins)
			if err != nil {
				t.Fatal(err)
			}
			if got.DeadLetter != tt.dead {
				t.Fatalf("dead letter = %v, want %v", got.DeadLetter, tt.dead)
			}
			if !got.Record.Timestamp.Equal(commit) {
				t.Fatalf("record timestamp = %v, want the commit time %v", got.Record.Timestamp, commit)
			}
			refused := RefusedRecord(got.Record, Origin{Table: "public.outbox"}, "outbox.dlq", "too large", true)
			if !refused.Timestamp.Equal(commit) {
				t.Errorf("the dead-letter record of a refused record has timestamp %v, want the commit time %v", refused.Timestamp, commit)
			}
		})
	}
	msg := MessageDeadLetter("outbox.dlq", []byte("x"), "outbox", testLSN, testXID, commit, "bad")
	if !msg.Timestamp.Equal(commit) {
		t.Errorf("a dead-lettered outbox message has timestamp %v, want its commit time %v", msg.Timestamp, commit)
	}
	var zero kgo.Record
	if nonTxn := MessageDeadLetter("outbox.dlq", []byte("x"), "outbox", testLSN, 0, time.Time{}, "bad"); !nonTxn.Timestamp.Equal(zero.Timestamp) {
		t.Errorf("a non-transactional message (no commit) has timestamp %v, want none (the producer's clock)", nonTxn.Timestamp)
	}
}
