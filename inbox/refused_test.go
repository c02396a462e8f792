package inbox_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/inbox"
	"github.com/walbox/walbox/router"
)

// walboxRecord is the record walbox's router makes of a classic outbox row
// with the given id (nil: NULL) and headers column, as a consumer reads it
// at offset.
func walboxRecord(t *testing.T, id *string, headers string, offset int64) *kgo.Record {
	t.Helper()
	r, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	col := func(name string, oid uint32) decoder.Column {
		return decoder.Column{Name: name, TypeOID: oid, TypeModifier: -1}
	}
	txt := func(s string) decoder.Value { return decoder.Value{Kind: decoder.KindText, Data: []byte(s)} }
	idVal := decoder.Value{Kind: decoder.KindNull}
	if id != nil {
		idVal = txt(*id)
	}
	routed, err := r.Route(&decoder.Insert{
		XID: 771, LSN: 0x16B3748, CommitLSN: 0x16B3848,
		Relation: &decoder.Relation{ID: 16390, Namespace: "public", Name: "outbox", Columns: []decoder.Column{
			col("id", decoder.Int8OID), col("aggregate_type", decoder.TextOID), col("aggregate_id", decoder.TextOID),
			col("event_type", decoder.TextOID), col("payload", decoder.JSONBOID), col("headers", decoder.JSONBOID),
		}},
		Values: []decoder.Value{idVal, txt("account"), txt("a"), txt("Deposited"), txt(`{"cents": 1}`), txt(headers)},
	})
	if err != nil {
		t.Fatal(err)
	}
	rec := routed.Record
	rec.Partition, rec.Offset = 0, offset
	return rec
}

func ptr(s string) *string { return &s }

// TestRefusedWalboxRecords: the records walbox can emit that the inbox
// cannot deduplicate, made by walbox's own router, are refused with
// ErrMissingEventID naming the record (topic, partition, offset) and the
// fix, before anything is written or any handler runs, never skipped: a
// row whose headers column carries an event_id that differs from its id
// column (two disagreeing event_id headers), and a row whose id is NULL
// (no event_id header). A headers column repeating the same id is
// accepted.
func TestRefusedWalboxRecords(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "billing"})
	conn := connect(t, e.dsn)
	good := walboxRecord(t, ptr("41"), `{"traceparent": "00-1"}`, 0)
	tests := []struct {
		name string
		rec  *kgo.Record
		want []string
	}{
		{"headers carry another event_id", walboxRecord(t, ptr("42"), `{"event_id": "order-7"}`, 1),
			[]string{`topic=outbox.event.account partition=0 offset=1 has two "event_id" headers, "42" and "order-7"`, "headers column must not carry"}},
		{"NULL id", walboxRecord(t, nil, `{}`, 2),
			[]string{`topic=outbox.event.account partition=0 offset=2 has no "event_id" header`, "id column is missing or NULL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			called := 0
			fn := func(context.Context, pgx.Tx, *kgo.Record) error { called++; return nil }
			_, err := e.ib.ProcessBatch(ctx(t), conn, []*kgo.Record{good, tt.rec}, fn)
			if !errors.Is(err, inbox.ErrMissingEventID) || !containsAll(err.Error(), append(tt.want, "record 2 of 2")...) {
				t.Fatalf("ProcessBatch: %v; want ErrMissingEventID containing %q", err, tt.want)
			}
			if _, err := e.ib.Process(ctx(t), conn, tt.rec, deposit(1)); !errors.Is(err, inbox.ErrMissingEventID) {
				t.Fatalf("Process: %v; want ErrMissingEventID", err)
			}
			if called != 0 || inboxRows(t, conn, "walbox_inbox", "billing") != 0 {
				t.Fatalf("handler called %d times, or an inbox row written", called)
			}
		})
	}
	same := walboxRecord(t, ptr("43"), `{"event_id": "43"}`, 3)
	if applied, err := e.ib.ProcessBatch(ctx(t), conn, []*kgo.Record{good, same}, depositEach); err != nil || !allTrue(applied) {
		t.Fatalf("a headers column repeating the id: %v, %v; want both applied", applied, err)
	}
}
