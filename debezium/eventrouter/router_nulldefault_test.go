package eventrouter

import (
	"errors"
	"testing"
	"time"

	"github.com/walbox/walbox/router"
)

// An explicit NULL in the route-by or the timestamp column is read raw, as
// Debezium reads them, even when the column has a DEFAULT: walbox read the
// default (Struct.get), which for DEFAULT now() (Debezium parses it as the
// epoch) gave records of 1970, and routed with the default where Debezium
// fails the task.
func TestRouteNullWithDefault(t *testing.T) {
	withDefaults := func(c *Config) {
		c.EventTimestampColumn = "created_at"
		c.Columns = map[string][]ColumnInfo{"public.outbox": {
			{Name: "id"}, {Name: "aggregatetype", Default: "'order'::character varying"},
			{Name: "aggregateid"}, {Name: "type"}, {Name: "payload"},
			{Name: "created_at", Default: "now()"},
		}}
	}
	now := time.Date(2026, 12, 1, 2, 0, 0, 0, time.UTC)
	r, err := New(testConfig(withDefaults))
	if err != nil {
		t.Fatal(err)
	}
	r.now = func() time.Time { return now }
	cols := append(canonical(str("{}")), col{name: "created_at", oid: oidTimestamp, value: nil})
	got, err := r.Route(insert(cols))
	if err != nil {
		t.Fatal(err)
	}
	if !got.Record.Timestamp.Equal(now) {
		t.Errorf("NULL timestamp with DEFAULT now(): record timestamp %v, want the processing time %v", got.Record.Timestamp, now)
	}

	cols[1].value = nil // aggregatetype
	_, err = r.Route(insert(cols))
	var ire *router.InvalidRowError
	if !errors.As(err, &ire) || ire.Column != "aggregatetype" {
		t.Errorf("NULL route-by with a DEFAULT: %v, want an invalid row naming aggregatetype", err)
	}
}
