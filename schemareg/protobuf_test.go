package schemareg

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"
)

const orderProto = `syntax = "proto3";
package shop;
import "google/protobuf/timestamp.proto";
import "money.proto";

message Order {
  int64 id = 1;
  Status status = 2;
  repeated Line lines = 3;
  google.protobuf.Timestamp created = 4;
  Money total = 5;
  message Line { string sku = 1; int32 n = 2; }
}
enum Status { NEW = 0; PAID = 1; }
message Refund { int64 order_id = 1; }
`

const moneyProto = `syntax = "proto3";
package shop;
message Money { string currency = 1; int64 units = 2; }
`

func TestProtobufEncode(t *testing.T) {
	f := newFake(t)
	f.register(t, "money", sr.TypeProtobuf, moneyProto)
	id := f.register(t, "orders-value", sr.TypeProtobuf, orderProto,
		sr.SchemaReference{Name: "money.proto", Subject: "money", Version: 1})

	tests := []struct {
		name      string
		message   string
		doc       string
		wantIndex []byte // the header's message-index bytes
		path      string
		problem   []string
	}{
		{name: "first message", doc: `{"id": "7", "status": "PAID", "lines": [{"sku": "a", "n": 2}], "created": "2024-01-02T03:04:05Z", "total": {"currency": "EUR", "units": 5}}`,
			wantIndex: []byte{0}},
		{name: "named message", message: "shop.Refund", doc: `{"orderId": 7}`, wantIndex: []byte{2, 2}},
		{name: "nested message", message: "shop.Order.Line", doc: `{"sku": "a"}`, wantIndex: []byte{4, 0, 0}},
		{name: "string where an int64 is not a number", doc: `{"id": "x"}`, path: "$", problem: []string{"id", `"x"`}},
		{name: "unknown field", doc: `{"colour": 1}`, path: "$", problem: []string{`unknown field "colour"`}},
		{name: "unknown enum value", doc: `{"status": "GONE"}`, path: "$", problem: []string{"enum", "GONE"}},
		{name: "int32 out of range", message: "shop.Order.Line", doc: `{"n": 2147483648}`, path: "$", problem: []string{"int32", "2147483648"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, _ := newTestEncoder(t, f, Config{Format: FormatProtobuf, ProtobufMessage: tt.message})
			out, err := e.Encode(context.Background(), nil, "orders", []byte(tt.doc))
			if tt.path != "" {
				wantPayloadError(t, err, tt.path, tt.problem...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotID, body, err := ParseHeader(out)
			if err != nil || int(gotID) != id {
				t.Fatalf("header id %d, %v; want %d", gotID, err, id)
			}
			index, msg, err := ParseIndex(body)
			if err != nil {
				t.Fatal(err)
			}
			if got := body[:len(body)-len(msg)]; string(got) != string(tt.wantIndex) {
				t.Errorf("message-index bytes %v, want %v (index %v)", got, tt.wantIndex, index)
			}
			// Decode with the compiled descriptor and compare as JSON.
			pc, err := newProtoCodec(orderProto, []reference{{"money.proto", moneyProto}}, tt.message)
			if err != nil {
				t.Fatal(err)
			}
			got, want := dynamicpb.NewMessage(pc.md), dynamicpb.NewMessage(pc.md)
			if err := proto.Unmarshal(msg, got); err != nil {
				t.Fatal(err)
			}
			if err := protojson.Unmarshal([]byte(tt.doc), want); err != nil {
				t.Fatal(err)
			}
			if !proto.Equal(got, want) {
				t.Errorf("decoded %v, want %v", got, want)
			}
		})
	}
}

func TestProtobufUnknownMessage(t *testing.T) {
	f := newFake(t)
	f.register(t, "orders-value", sr.TypeProtobuf, moneyProto)
	e, _ := newTestEncoder(t, f, Config{Format: FormatProtobuf, ProtobufMessage: "shop.Nope"})
	_, err := e.Encode(context.Background(), nil, "orders", []byte(`{}`))
	wantRegistryError(t, err, ErrRegistryRefused, "declares no message shop.Nope", "shop.Money", `subject "orders-value"`)
}
