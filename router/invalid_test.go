package router

import (
	"errors"
	"strings"
	"testing"

	"github.com/walbox/walbox/decoder"
)

// TestRouteInvalidRows runs every kind of invalid row under both policies:
// PolicyFail must return an *InvalidRowError that says where the row is and
// how to fix it; PolicyDeadLetter must route it to the dead-letter topic with
// whatever could be computed. Neither may drop it.
func TestRouteInvalidRows(t *testing.T) {
	const dlt = "outbox.dead-letter"
	watermillRel := relation(16430, "watermill_orders",
		col("uuid", decoder.VarcharOID),
		col("payload", decoder.JSONOID),
		col("metadata", decoder.JSONOID),
	)
	watermillCols := Columns{ID: "uuid", AggregateID: "metadata->>Aggregate-Id", Headers: "metadata"}
	noAggID := relation(16440, "outbox",
		col("id", decoder.Int8OID), col("aggregate_type", decoder.TextOID), col("payload", decoder.JSONBOID))
	noPayload := relation(16441, "outbox",
		col("id", decoder.Int8OID), col("aggregate_type", decoder.TextOID), col("aggregate_id", decoder.TextOID))
	byteaRel := relation(16442, "outbox",
		col("id", decoder.Int8OID), col("aggregate_type", decoder.TextOID), col("aggregate_id", decoder.TextOID),
		col("payload", decoder.ByteaOID))
	topicRel := relation(16443, "outbox",
		col("id", decoder.Int8OID), col("topic", decoder.TextOID), col("aggregate_id", decoder.TextOID),
		col("payload", decoder.JSONBOID))
	topicCols := Columns{Topic: "topic"}
	classic := func(override map[string]decoder.Value) *decoder.Insert { return classicRow(classicRel(), override) }

	tests := []struct {
		name       string
		cols       Columns
		template   string
		ins        *decoder.Insert
		wantColumn string
		wantReason string // substring of the reason
		// Expected dead-letter record: key and value as summarize renders
		// them ("<nil>" when absent), and the headers before the walbox_* ones.
		wantKey, wantValue string
		wantEventID        string
		wantHeaders        []string
	}{
		{
			name:       "aggregate id NULL",
			ins:        classic(map[string]decoder.Value{"aggregate_id": null}),
			wantColumn: "aggregate_id", wantReason: `aggregate id: column "aggregate_id" is NULL`,
			wantKey: "<nil>", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "aggregate id column missing",
			ins:        insert(noAggID, txt("5"), txt("order"), txt(`{}`)),
			wantColumn: "aggregate_id", wantReason: `table public.outbox has no column "aggregate_id"`,
			wantKey: "<nil>", wantValue: "{}", wantEventID: "5", wantHeaders: []string{"event_id=5"},
		},
		{
			name:       "aggregate id unchanged TOAST",
			ins:        classic(map[string]decoder.Value{"aggregate_id": toast}),
			wantColumn: "aggregate_id", wantReason: `column "aggregate_id" is an unchanged TOAST value`,
			wantKey: "<nil>", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "aggregate id of an unknown value kind",
			ins:        classic(map[string]decoder.Value{"aggregate_id": {Kind: 9, Data: []byte("x")}}),
			wantColumn: "aggregate_id", wantReason: "value kind the decoder does not define",
			wantKey: "<nil>", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "payload NULL",
			ins:        classic(map[string]decoder.Value{"payload": null}),
			wantColumn: "payload", wantReason: `payload: column "payload" is NULL`,
			wantKey: "o-1", wantValue: "<nil>", wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "payload column missing",
			ins:        insert(noPayload, txt("5"), txt("order"), txt("o-1")),
			wantColumn: "payload", wantReason: `has no column "payload"`,
			wantKey: "o-1", wantValue: "<nil>", wantEventID: "5", wantHeaders: []string{"event_id=5"},
		},
		{
			name:       "payload unchanged TOAST",
			ins:        classic(map[string]decoder.Value{"payload": toast}),
			wantColumn: "payload", wantReason: "unchanged TOAST",
			wantKey: "o-1", wantValue: "<nil>", wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "payload bytea text malformed: dead letter keeps the text",
			ins:        insert(byteaRel, txt("5"), txt("order"), txt("o-1"), txt(`\x7g`)),
			wantColumn: "payload", wantReason: "not valid bytea text output",
			wantKey: "o-1", wantValue: `\x7g`, wantEventID: "5", wantHeaders: []string{"event_id=5"},
		},
		{
			name:       "template placeholder names a column the table lacks",
			template:   "events.{region}",
			ins:        classic(nil),
			wantColumn: "region", wantReason: `topic template placeholder {region}: table public.outbox has no column "region"`,
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "template placeholder NULL",
			ins:        classic(map[string]decoder.Value{"aggregate_type": null}),
			wantColumn: "aggregate_type", wantReason: `{aggregate_type}: column "aggregate_type" is NULL`,
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "template placeholder unchanged TOAST",
			ins:        classic(map[string]decoder.Value{"aggregate_type": toast}),
			wantColumn: "aggregate_type", wantReason: "unchanged TOAST",
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "template placeholder empty",
			ins:        classic(map[string]decoder.Value{"aggregate_type": txt("")}),
			wantColumn: "aggregate_type", wantReason: "{aggregate_type}: value is empty",
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "template renders the whole topic empty",
			template:   "{aggregate_type}",
			ins:        classic(map[string]decoder.Value{"aggregate_type": txt("")}),
			wantColumn: "aggregate_type", wantReason: "value is empty",
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "template renders a character Kafka rejects",
			ins:        classic(map[string]decoder.Value{"aggregate_type": txt("order/eu")}),
			wantColumn: "aggregate_type", wantReason: `rendered "outbox.event.order/eu": topic name contains "/"`,
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "template renders a topic over 249 characters",
			ins:        classic(map[string]decoder.Value{"aggregate_type": txt(strings.Repeat("a", 237))}),
			wantColumn: "aggregate_type", wantReason: "250 characters, over Kafka's limit of 249",
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "template renders ..",
			template:   "{aggregate_type}",
			ins:        classic(map[string]decoder.Value{"aggregate_type": txt("..")}),
			wantColumn: "aggregate_type", wantReason: `cannot be "." or ".."`,
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "topic column NULL",
			cols:       topicCols,
			ins:        insert(topicRel, txt("5"), null, txt("o-1"), txt("{}")),
			wantColumn: "topic", wantReason: `topic: column "topic" is NULL`,
			wantKey: "o-1", wantValue: "{}", wantEventID: "5", wantHeaders: []string{"event_id=5"},
		},
		{
			name:       "topic column empty",
			cols:       topicCols,
			ins:        insert(topicRel, txt("5"), txt(""), txt("o-1"), txt("{}")),
			wantColumn: "topic", wantReason: "topic name is empty",
			wantKey: "o-1", wantValue: "{}", wantEventID: "5", wantHeaders: []string{"event_id=5"},
		},
		{
			name:       "topic column is .",
			cols:       topicCols,
			ins:        insert(topicRel, txt("5"), txt("."), txt("o-1"), txt("{}")),
			wantColumn: "topic", wantReason: `cannot be "." or ".."`,
			wantKey: "o-1", wantValue: "{}", wantEventID: "5", wantHeaders: []string{"event_id=5"},
		},
		{
			name:       "topic column has a space",
			cols:       topicCols,
			ins:        insert(topicRel, txt("5"), txt("my topic"), txt("o-1"), txt("{}")),
			wantColumn: "topic", wantReason: `holds "my topic": topic name contains " "`,
			wantKey: "o-1", wantValue: "{}", wantEventID: "5", wantHeaders: []string{"event_id=5"},
		},
		{
			name:       "topic column missing from the table",
			cols:       topicCols,
			ins:        insert(noAggID, txt("5"), txt("order"), txt("{}")),
			wantColumn: "aggregate_id", wantReason: `has no column "aggregate_id"`, // the first problem wins
			wantKey: "<nil>", wantValue: "{}", wantEventID: "5", wantHeaders: []string{"event_id=5"},
		},
		{
			name:       "headers a JSON array",
			ins:        classic(map[string]decoder.Value{"headers": txt(`[{"a": 1}]`)}),
			wantColumn: "headers", wantReason: `headers: column "headers" is a JSON array, not an object`,
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", `walbox_headers=[{"a": 1}]`},
		},
		{
			name:       "headers a JSON string",
			ins:        classic(map[string]decoder.Value{"headers": txt(`"trace=1"`)}),
			wantColumn: "headers", wantReason: "is a JSON string, not an object",
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", `walbox_headers="trace=1"`},
		},
		{
			name:       "headers JSON null",
			ins:        classic(map[string]decoder.Value{"headers": txt(`null`)}),
			wantColumn: "headers", wantReason: "is a JSON null, not an object",
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", `walbox_headers=null`},
		},
		{
			name:       "headers malformed JSON",
			ins:        classic(map[string]decoder.Value{"headers": txt(`{"a": 1`)}),
			wantColumn: "headers", wantReason: "is not valid JSON",
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated", `walbox_headers={"a": 1`},
		},
		{
			name:       "headers unchanged TOAST",
			ins:        classic(map[string]decoder.Value{"headers": toast}),
			wantColumn: "headers", wantReason: "unchanged TOAST",
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "event_type=OrderCreated"},
		},
		{
			name:       "id unchanged TOAST",
			ins:        classic(map[string]decoder.Value{"id": toast}),
			wantColumn: "id", wantReason: `event id: column "id" is an unchanged TOAST value`,
			wantKey: "o-1", wantValue: `{"total": 12.5}`,
			wantHeaders: []string{"event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "event type unchanged TOAST",
			ins:        classic(map[string]decoder.Value{"event_type": toast}),
			wantColumn: "event_type", wantReason: `event type: column "event_type" is an unchanged TOAST value`,
			wantKey: "o-1", wantValue: `{"total": 12.5}`, wantEventID: "42",
			wantHeaders: []string{"event_id=42", "correlation_id=c-1", "trace_id=t-9"},
		},
		{
			name:       "->> key missing",
			cols:       watermillCols,
			template:   "wm.events",
			ins:        insert(watermillRel, txt("u-1"), txt(`{}`), txt(`{"Event-Type":"X"}`)),
			wantColumn: "metadata->>Aggregate-Id", wantReason: `column "metadata" has no key "Aggregate-Id"`,
			wantKey: "<nil>", wantValue: "{}", wantEventID: "u-1", wantHeaders: []string{"event_id=u-1", "Event-Type=X"},
		},
		{
			name:       "->> key is JSON null",
			cols:       watermillCols,
			template:   "wm.events",
			ins:        insert(watermillRel, txt("u-1"), txt(`{}`), txt(`{"Aggregate-Id":null}`)),
			wantColumn: "metadata->>Aggregate-Id", wantReason: `key "Aggregate-Id" of column "metadata" is JSON null`,
			wantKey: "<nil>", wantValue: "{}", wantEventID: "u-1", wantHeaders: []string{"event_id=u-1", "Aggregate-Id=null"},
		},
		{
			name:       "->> on a column that is not an object",
			cols:       watermillCols,
			template:   "wm.events",
			ins:        insert(watermillRel, txt("u-1"), txt(`{}`), txt(`[1]`)),
			wantColumn: "metadata->>Aggregate-Id", wantReason: `column "metadata" is not a JSON object, so ->> cannot read key "Aggregate-Id"`,
			wantKey: "<nil>", wantValue: "{}", wantEventID: "u-1", wantHeaders: []string{"event_id=u-1", "walbox_headers=[1]"},
		},
		{
			name:       "->> column NULL",
			cols:       watermillCols,
			template:   "wm.events",
			ins:        insert(watermillRel, txt("u-1"), txt(`{}`), null),
			wantColumn: "metadata->>Aggregate-Id", wantReason: `column "metadata" is NULL`,
			wantKey: "<nil>", wantValue: "{}", wantEventID: "u-1", wantHeaders: []string{"event_id=u-1"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name+"/fail", func(t *testing.T) {
			r := mustNew(t, Config{Columns: tt.cols, TopicTemplate: tt.template})
			got, err := r.Route(tt.ins)
			if err == nil {
				t.Fatalf("Route succeeded with %v, want an invalid-row error", summarize(t, got))
			}
			if !errors.Is(err, ErrInvalidRow) {
				t.Fatalf("errors.Is(%v, ErrInvalidRow) = false", err)
			}
			var ire *InvalidRowError
			if !errors.As(err, &ire) {
				t.Fatalf("error %T is not an *InvalidRowError", err)
			}
			if ire.EventID != tt.wantEventID || ire.LSN != testLSN || ire.XID != testXID ||
				ire.Table != tt.ins.Relation.QualifiedName() || ire.Column != tt.wantColumn {
				t.Errorf("InvalidRowError = %+v, want EventID %q, LSN %s, XID %d, Table %s, Column %q",
					*ire, tt.wantEventID, testLSN, testXID, tt.ins.Relation.QualifiedName(), tt.wantColumn)
			}
			if !strings.Contains(ire.Reason, tt.wantReason) {
				t.Errorf("Reason = %q, want it to contain %q", ire.Reason, tt.wantReason)
			}
			msg := err.Error()
			for _, want := range []string{"0/16B3748", "xid 771", tt.wantReason, "invalid_rows: dead-letter", "fix the writer"} {
				if !strings.Contains(msg, want) {
					t.Errorf("message %q does not contain %q", msg, want)
				}
			}
			if tt.wantEventID != "" && !strings.Contains(msg, `id "`+tt.wantEventID+`"`) {
				t.Errorf("message %q does not name the row id %q", msg, tt.wantEventID)
			}
			if tt.wantColumn != "" && !strings.Contains(msg, `column "`+tt.wantColumn+`"`) {
				t.Errorf("message %q does not name the column %q", msg, tt.wantColumn)
			}
		})
		t.Run(tt.name+"/dead-letter", func(t *testing.T) {
			r := mustNew(t, Config{Columns: tt.cols, TopicTemplate: tt.template,
				InvalidRows: PolicyDeadLetter, DeadLetterTopic: dlt})
			got, err := r.Route(tt.ins)
			if err != nil {
				t.Fatalf("Route: %v", err)
			}
			if !strings.Contains(got.Reason, tt.wantReason) {
				t.Errorf("Reason = %q, want it to contain %q", got.Reason, tt.wantReason)
			}
			want := record{
				Topic: dlt, Key: tt.wantKey, Value: tt.wantValue, EventID: tt.wantEventID, DeadLetter: true,
				Headers: append(append([]string(nil), tt.wantHeaders...),
					"walbox_error="+got.Reason,
					"walbox_table="+tt.ins.Relation.QualifiedName(),
					"walbox_lsn=0/16B3748",
					"walbox_xid=771",
				),
			}
			assertRecord(t, got, want)
		})
	}
}

// TestRouteDeadLetterDoesNotLeakIntoNextRow: the dead-letter path and the
// normal path share scratch space; a valid row after an invalid one must
// route normally.
func TestRouteDeadLetterDoesNotLeakIntoNextRow(t *testing.T) {
	r := mustNew(t, Config{InvalidRows: PolicyDeadLetter, DeadLetterTopic: "dlq"})
	rel := classicRel()
	bad, err := r.Route(classicRow(rel, map[string]decoder.Value{"headers": txt(`[1]`)}))
	if err != nil || !bad.DeadLetter {
		t.Fatalf("invalid row: DeadLetter=%v err=%v", bad.DeadLetter, err)
	}
	good, err := r.Route(classicRow(rel, nil))
	if err != nil {
		t.Fatal(err)
	}
	assertRecord(t, good, record{
		Topic: "outbox.event.order", Key: "o-1", Value: `{"total": 12.5}`, EventID: "42",
		Headers: []string{"event_id=42", "event_type=OrderCreated", "correlation_id=c-1", "trace_id=t-9"},
	})
}
