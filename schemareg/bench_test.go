package schemareg

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// A typical outbox payload, about 200 bytes.
const benchDoc = `{"id": 7, "qty": 2, "status": "PAID", "price": 9.5, "note": "gift",
 "tags": ["a", "b"], "lines": [{"sku": "s-1", "n": 1}, {"sku": "s-2", "n": 3}]}`

func BenchmarkEncode(b *testing.B) {
	f := &fakeRegistry{Registry: srfake.New()}
	defer f.Close()
	for _, tc := range []struct {
		name   string
		format Format
		typ    sr.SchemaType
		schema string
		doc    string
	}{
		{"avro", FormatAvro, sr.TypeAvro, orderAvro, benchDoc},
		// walbox-bench's payload and schema (bench/load.go, bench/avro.go).
		{"avro bench payload", FormatAvro, sr.TypeAvro, benchAvro, benchPayload},
		{"json-schema", FormatJSONSchema, sr.TypeJSON, `{"type": "object", "properties": {"id": {"type": "integer"}, "lines": {"type": "array"}}, "required": ["id"]}`, benchDoc},
		{"protobuf", FormatProtobuf, sr.TypeProtobuf, orderProto, `{"id": "7", "status": "PAID", "lines": [{"sku": "s-1", "n": 1}, {"sku": "s-2", "n": 3}]}`},
	} {
		subject := tc.name + "-value"
		refs := []sr.SchemaReference(nil)
		if tc.format == FormatProtobuf {
			if _, _, err := f.RegisterSchema("money", sr.Schema{Schema: moneyProto, Type: sr.TypeProtobuf}); err != nil {
				b.Fatal(err)
			}
			refs = []sr.SchemaReference{{Name: "money.proto", Subject: "money", Version: 1}}
		}
		if _, _, err := f.RegisterSchema(subject, sr.Schema{Schema: tc.schema, Type: tc.typ, References: refs}); err != nil {
			b.Fatal(err)
		}
		cl, err := NewClient(ClientConfig{URLs: []string{f.URL()}})
		if err != nil {
			b.Fatal(err)
		}
		e, err := NewEncoder(Config{Format: tc.format}, cl, nil)
		if err != nil {
			b.Fatal(err)
		}
		doc := []byte(tc.doc)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			var buf []byte
			for b.Loop() {
				var err error
				if buf, err = e.Encode(context.Background(), buf[:0], tc.name, doc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("avro inferred", func(b *testing.B) {
		cl, err := NewClient(ClientConfig{URLs: []string{f.URL()}})
		if err != nil {
			b.Fatal(err)
		}
		e, err := NewEncoder(Config{Format: FormatAvro, Source: Inferred}, cl, nil)
		if err != nil {
			b.Fatal(err)
		}
		doc := []byte(benchDoc)
		b.ReportAllocs()
		var buf []byte
		for b.Loop() {
			if buf, err = e.Encode(context.Background(), buf[:0], "inferred", doc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("json.Valid (the JSON path's check)", func(b *testing.B) {
		doc := []byte(benchDoc)
		for b.Loop() {
			if !json.Valid(doc) {
				b.Fatal("invalid")
			}
		}
	})
}
