package debezium_test

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/walbox/walbox/debezium"
)

// The other logical slots of the database, which receive walbox's
// heartbeats (an other connector on one of them emits them as records).
func TestOtherLogicalSlots(t *testing.T) {
	e := newTakeoverEnv(t)
	e.exec(t, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s_other', 'pgoutput')", e.slot))
	e.exec(t, fmt.Sprintf("SELECT pg_create_logical_replication_slot('%s_decoding', 'test_decoding')", e.slot))
	got, err := debezium.OtherLogicalSlots(ctxT(t), e.conn, e.slot)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{e.slot + "_decoding", e.slot + "_other"}; !reflect.DeepEqual(got, want) {
		t.Errorf("other slots %q, want %q", got, want)
	}
}
