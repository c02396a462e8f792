package debezium

import "testing"

// The snapshot fields of the offset values Debezium's Postgres connector
// stores, by version. Debezium 1.x and 2.x (before 2.5) write
// "snapshot":true with "last_snapshot_record" while the initial snapshot
// runs and drop both once streaming; 2.5 and later (3.x included) write the
// snapshot's type as an enum name ("INITIAL", "BLOCKING") with
// "snapshot_completed", and keep "last_snapshot_record". Until this test,
// walbox recognised only true/"true": a 3.x connector stopped
// mid-snapshot ("snapshot":"INITIAL") was taken over from its lsn and the
// rows the snapshot had not yet emitted were never sent, and a finished
// 1.x snapshot ("last_snapshot_record":true) was refused.
func TestParseOffsetSnapshot(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		running bool
	}{
		{name: "streaming (every version)", in: `{"lsn":100,"lsn_proc":100,"txId":7,"ts_usec":1}`},
		{name: "1.x mid-snapshot", in: `{"lsn":100,"txId":7,"ts_usec":1,"snapshot":true,"last_snapshot_record":false}`, running: true},
		{name: "1.x last snapshot record", in: `{"lsn":100,"txId":7,"ts_usec":1,"snapshot":true,"last_snapshot_record":true}`},
		{name: "1.x mid-snapshot, no last_snapshot_record", in: `{"lsn":100,"snapshot":true}`, running: true},
		{name: "string true mid-snapshot", in: `{"lsn":100,"snapshot":"true","last_snapshot_record":"false"}`, running: true},
		{name: "string true, last record", in: `{"lsn":100,"snapshot":"true","last_snapshot_record":"true"}`},
		{name: "snapshot false", in: `{"lsn":100,"snapshot":false}`},
		{name: "snapshot null", in: `{"lsn":100,"snapshot":null}`},
		{name: "2.x lsn_commit streaming", in: `{"lsn":100,"lsn_proc":100,"lsn_commit":90,"txId":7,"ts_usec":1,"messageType":"INSERT"}`},
		{name: "3.x mid initial snapshot", in: `{"lsn":100,"txId":7,"ts_usec":1,"snapshot":"INITIAL","snapshot_completed":false,"last_snapshot_record":false}`, running: true},
		{name: "3.x initial snapshot, no completion key", in: `{"lsn":100,"snapshot":"INITIAL"}`, running: true},
		{name: "3.x last snapshot record, completed", in: `{"lsn":100,"txId":7,"ts_usec":1,"snapshot":"INITIAL","snapshot_completed":true,"last_snapshot_record":true}`},
		{name: "3.x completed without last record", in: `{"lsn":100,"snapshot":"INITIAL","snapshot_completed":true}`},
		{name: "3.x last record, completed key false", in: `{"lsn":100,"snapshot":"INITIAL","snapshot_completed":false,"last_snapshot_record":true}`},
		{name: "3.x mid blocking snapshot", in: `{"lsn":100,"lsn_commit":90,"snapshot":"BLOCKING","snapshot_completed":false}`, running: true},
		{name: "3.x blocking snapshot completed", in: `{"lsn":100,"lsn_commit":90,"snapshot":"BLOCKING","snapshot_completed":true}`},
		{name: "unknown snapshot value: not taken for finished", in: `{"lsn":100,"snapshot":"SOMETHING_NEW"}`, running: true},
		{name: "completed as a string", in: `{"lsn":100,"snapshot":"INITIAL","snapshot_completed":"true"}`},
		{name: "completed not a boolean: not taken for finished", in: `{"lsn":100,"snapshot":"INITIAL","snapshot_completed":1}`, running: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := ParseOffset([]byte(tt.in))
			if err != nil {
				t.Fatal(err)
			}
			if o.Snapshot != tt.running {
				t.Errorf("%s: Snapshot = %t, want %t", tt.in, o.Snapshot, tt.running)
			}
			if o.LSN != 100 {
				t.Errorf("%s: LSN = %d", tt.in, o.LSN)
			}
		})
	}
}
