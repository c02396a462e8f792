package decoder

import (
	"strings"
	"testing"
)

// outboxRelation is the "classic" outbox table of six columns.
var outboxRelation = &Relation{
	ID: fixRelID, Namespace: "public", Name: "outbox",
	Columns: []Column{
		{Name: "id", TypeOID: Int8OID, TypeModifier: -1, Key: true},
		{Name: "aggregate_type", TypeOID: TextOID, TypeModifier: -1},
		{Name: "aggregate_id", TypeOID: UUIDOID, TypeModifier: -1},
		{Name: "event_type", TypeOID: TextOID, TypeModifier: -1},
		{Name: "payload", TypeOID: JSONBOID, TypeModifier: -1},
		{Name: "created_at", TypeOID: TimestamptzOID, TypeModifier: -1},
	},
}

// outboxPayload is a ~300 byte JSON event.
var outboxPayload = `{"order_id": "3f8e4a2c-9b1d-4e6f-a7c3-5d2b8e1f0a94", "customer_id": "c-104233", ` +
	`"currency": "EUR", "total": "149.90", "items": [{"sku": "BK-2291", "qty": 1, "price": "99.90"}, ` +
	`{"sku": "MG-0042", "qty": 2, "price": "25.00"}], "shipping": {"country": "DE", "method": "standard"}, ` +
	`"placed_at": "2024-05-01T12:00:00.123456Z"}`

func outboxInsert() []byte {
	return insertMsg(fixRelID, []Value{
		{Kind: KindText, Data: []byte("123456789")},
		{Kind: KindText, Data: []byte("order")},
		{Kind: KindText, Data: []byte("3f8e4a2c-9b1d-4e6f-a7c3-5d2b8e1f0a94")},
		{Kind: KindText, Data: []byte("OrderCreated")},
		{Kind: KindText, Data: []byte(outboxPayload)},
		{Kind: KindText, Data: []byte("2024-05-01 12:00:00.123456+00")},
	})
}

func BenchmarkDecodeInsert(b *testing.B) {
	d := New()
	if _, err := d.Decode(0, relationMsg(outboxRelation)); err != nil {
		b.Fatal(err)
	}
	if _, err := d.Decode(0, fixBegin); err != nil {
		b.Fatal(err)
	}
	msg := outboxInsert()
	b.SetBytes(int64(len(msg)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := d.Decode(fixInsertLSN, msg); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDecodeTransaction decodes Begin, one outbox Insert and Commit: the
// full per-event cost when each event is its own transaction.
func BenchmarkDecodeTransaction(b *testing.B) {
	d := New()
	if _, err := d.Decode(0, relationMsg(outboxRelation)); err != nil {
		b.Fatal(err)
	}
	msgs := [][]byte{fixBegin, outboxInsert(), fixCommit}
	b.ReportAllocs()
	for b.Loop() {
		for _, m := range msgs {
			if _, err := d.Decode(fixInsertLSN, m); err != nil {
				b.Fatal(err)
			}
		}
	}
}

func BenchmarkDecodeByteaHex(b *testing.B) {
	text := []byte(encodeByteaHex([]byte(strings.Repeat(outboxPayload, 1))))
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeBytea(text); err != nil {
			b.Fatal(err)
		}
	}
}

func TestOutboxPayloadSize(t *testing.T) {
	if n := len(outboxPayload); n < 280 || n > 330 {
		t.Errorf("benchmark payload is %d bytes, want about 300", n)
	}
}
