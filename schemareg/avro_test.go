package schemareg

import (
	"context"
	"math/big"
	"reflect"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

const orderAvro = `{
  "type": "record", "name": "Order", "namespace": "shop",
  "fields": [
    {"name": "id", "type": "long"},
    {"name": "qty", "type": "int"},
    {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID"]}},
    {"name": "note", "type": ["null", "string"], "default": null},
    {"name": "price", "type": "double"},
    {"name": "ratio", "type": "float", "default": 0.5},
    {"name": "paid", "type": "boolean", "default": false},
    {"name": "tags", "type": {"type": "array", "items": "string"}, "default": []},
    {"name": "attrs", "type": {"type": "map", "values": "long"}, "default": {}},
    {"name": "lines", "type": {"type": "array", "items": {
      "type": "record", "name": "Line",
      "fields": [{"name": "sku", "type": "string"}, {"name": "n", "type": "int"}]}}, "default": []},
    {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}, "default": "\u0000"},
    {"name": "digest", "type": {"type": "fixed", "name": "MD5", "size": 4}, "default": "\u0000\u0000\u0000\u0000"},
    {"name": "raw", "type": "bytes", "default": ""},
    {"name": "created", "type": {"type": "long", "logicalType": "timestamp-millis"}, "default": 0},
    {"name": "day", "type": {"type": "int", "logicalType": "date"}, "default": 0},
    {"name": "choice", "type": ["null", "long", "string", "Line"], "default": null}
  ]}`

const orderBase = `"id": 7, "qty": 2, "status": "NEW", "price": 9.5`

func TestAvroEncode(t *testing.T) {
	f := newFake(t)
	id := f.register(t, "orders-value", sr.TypeAvro, orderAvro)
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro})
	schema := avro.MustParse(orderAvro)

	tests := []struct {
		name    string
		doc     string
		want    map[string]any // fields checked after decoding
		path    string         // wanted error path; "" for success
		problem []string
	}{
		{name: "minimal, defaults filled", doc: `{` + orderBase + `}`,
			want: map[string]any{"id": int64(7), "qty": 2, "status": "NEW", "note": nil, "ratio": float32(0.5), "tags": []any{}}},
		{name: "every field", doc: `{` + orderBase + `, "note": "hi", "paid": true, "tags": ["a"], "attrs": {"x": 1},
			"lines": [{"sku": "s1", "n": 3}], "amount": 12.34, "digest": "AQIDBA==", "raw": "/w==", "created": 1700000000000,
			"day": 19000, "choice": "text"}`,
			want: map[string]any{"note": "hi", "paid": true, "tags": []any{"a"}, "attrs": map[string]any{"x": int64(1)},
				"lines": []any{map[string]any{"sku": "s1", "n": 3}}, "raw": []byte{0xff}, "choice": map[string]any{"string": "text"}}},
		{name: "union wrapped form", doc: `{` + orderBase + `, "note": {"string": "w"}, "choice": {"long": 5}}`,
			want: map[string]any{"note": "w", "choice": map[string]any{"long": int64(5)}}},
		{name: "union record branch", doc: `{` + orderBase + `, "choice": {"sku": "s", "n": 1}}`,
			want: map[string]any{"choice": map[string]any{"shop.Line": map[string]any{"sku": "s", "n": 1}}}},
		{name: "decimal as string", doc: `{` + orderBase + `, "amount": "-0.05"}`},
		{name: "long at its limit", doc: `{"id": 9223372036854775807, "qty": -2147483648, "status": "PAID", "price": 1}`,
			want: map[string]any{"id": int64(9223372036854775807), "qty": -2147483648}},

		{name: "string where a long is", doc: `{"id": "7", "qty": 2, "status": "NEW", "price": 1}`,
			path: "$.id", problem: []string{"expected an integer (long)", `the string "7"`}},
		{name: "missing required field", doc: `{"id": 7, "status": "NEW", "price": 1}`,
			path: "$.qty", problem: []string{`missing required field "qty"`, "shop.Order"}},
		{name: "unknown enum symbol", doc: `{"id": 7, "qty": 2, "status": "SHIPPED", "price": 1}`,
			path: "$.status", problem: []string{`unknown symbol "SHIPPED"`, "shop.Status", "NEW, PAID"}},
		{name: "int out of range", doc: `{"id": 7, "qty": 2147483648, "status": "NEW", "price": 1}`,
			path: "$.qty", problem: []string{"2147483648 is out of range for an Avro int"}},
		{name: "long out of range", doc: `{"id": 9223372036854775808, "qty": 1, "status": "NEW", "price": 1}`,
			path: "$.id", problem: []string{"out of range for an Avro long"}},
		{name: "fraction for an int", doc: `{"id": 7, "qty": 2.5, "status": "NEW", "price": 1}`,
			path: "$.qty", problem: []string{"a fraction or exponent is not an integer"}},
		{name: "float out of range", doc: `{` + orderBase + `, "ratio": 1e39}`,
			path: "$.ratio", problem: []string{"out of range for an Avro float"}},
		{name: "unknown field", doc: `{` + orderBase + `, "colour": "red"}`,
			path: "$.colour", problem: []string{`unknown field "colour"`}},
		{name: "nested path", doc: `{` + orderBase + `, "lines": [{"sku": "a", "n": 1}, {"sku": 5, "n": 1}]}`,
			path: "$.lines[1].sku", problem: []string{"expected a string", "the number 5"}},
		{name: "map value", doc: `{` + orderBase + `, "attrs": {"k": true}}`,
			path: `$.attrs["k"]`, problem: []string{"expected an integer (long)", "a boolean"}},
		{name: "null for a non-null field", doc: `{"id": null, "qty": 2, "status": "NEW", "price": 1}`,
			path: "$.id", problem: []string{"got null"}},
		{name: "nullable union with a wrong type", doc: `{` + orderBase + `, "note": 5}`,
			path: "$.note", problem: []string{"expected a string", "the number 5"}},
		{name: "value fits no union branch", doc: `{` + orderBase + `, "choice": true}`,
			path: "$.choice", problem: []string{"fits no branch of the union"}},
		{name: "decimal beyond scale", doc: `{` + orderBase + `, "amount": 1.234}`,
			path: "$.amount", problem: []string{"more fraction digits than the scale 2"}},
		{name: "decimal beyond precision", doc: `{` + orderBase + `, "amount": 12345.6}`,
			path: "$.amount", problem: []string{"more digits than the precision 6"}},
		{name: "fixed of the wrong size", doc: `{` + orderBase + `, "digest": "AQI="}`,
			path: "$.digest", problem: []string{"holds 4 bytes, got 2"}},
		{name: "bytes not base64", doc: `{` + orderBase + `, "raw": "@@"}`,
			path: "$.raw", problem: []string{"base64"}},
		{name: "not JSON", doc: `{"id": `, path: "$", problem: []string{"not valid JSON"}},
		{name: "two JSON values", doc: `{} {}`, path: "$", problem: []string{"more than one value"}},
		{name: "array for the record", doc: `[1]`, path: "$", problem: []string{"expected an object (record shop.Order)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := e.Encode(context.Background(), []byte("prefix"), "orders", []byte(tt.doc))
			if tt.path != "" {
				wantPayloadError(t, err, tt.path, tt.problem...)
				if string(out) != "prefix" {
					t.Errorf("dst after a failure: %q, want it unchanged", out)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if string(out[:6]) != "prefix" {
				t.Fatalf("dst not kept: %q", out)
			}
			gotID, body, err := ParseHeader(out[6:])
			if err != nil || int(gotID) != id {
				t.Fatalf("header: id %d, %v; want id %d", gotID, err, id)
			}
			var got map[string]any
			if err := avro.Unmarshal(schema, body, &got); err != nil {
				t.Fatalf("decode: %v", err)
			}
			for k, w := range tt.want {
				if !reflect.DeepEqual(got[k], w) {
					t.Errorf("field %s = %#v, want %#v", k, got[k], w)
				}
			}
		})
	}
}

// TestAvroDecimalValue checks the decimal's value, not only that it encodes.
func TestAvroDecimalValue(t *testing.T) {
	f := newFake(t)
	f.register(t, "orders-value", sr.TypeAvro, orderAvro)
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro})
	out, err := e.Encode(context.Background(), nil, "orders", []byte(`{`+orderBase+`, "amount": 12.3}`))
	if err != nil {
		t.Fatal(err)
	}
	_, body, _ := ParseHeader(out)
	var got map[string]any
	if err := avro.Unmarshal(avro.MustParse(orderAvro), body, &got); err != nil {
		t.Fatal(err)
	}
	if r, ok := got["amount"].(*big.Rat); !ok || r.Cmp(big.NewRat(123, 10)) != 0 {
		t.Errorf("amount %v, want 12.3", got["amount"])
	}
}
