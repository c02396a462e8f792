package schemareg

import (
	"context"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/dynamicpb"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/registrytest"
)

// TestApicurio runs every format against a real registry (Apicurio's
// Confluent API): the schemas are registered with franz-go's client, walbox
// encodes, and the records decode with the registered schema to the
// payload; an unknown subject is a refusal naming it (Apicurio answers
// 40402, not Confluent's 40401).
func TestApicurio(t *testing.T) {
	fulltest.Require(t, "starts Apicurio Registry")
	reg := registrytest.Start(t)
	ctx := context.Background()
	admin, err := sr.NewClient(sr.URLs(reg.URL))
	if err != nil {
		t.Fatal(err)
	}
	register := func(subject string, s sr.Schema) int {
		t.Helper()
		ss, err := admin.CreateSchema(ctx, subject, s)
		if err != nil {
			t.Fatalf("register %s: %v", subject, err)
		}
		return ss.ID
	}
	cl, err := NewClient(ClientConfig{URLs: []string{reg.URL}})
	if err != nil {
		t.Fatal(err)
	}
	encode := func(cfg Config, topic, doc string) ([]byte, error) {
		t.Helper()
		e, err := NewEncoder(cfg, cl, nil)
		if err != nil {
			t.Fatal(err)
		}
		return e.Encode(ctx, nil, topic, []byte(doc))
	}
	header := func(out []byte, id int) []byte {
		t.Helper()
		got, body, err := ParseHeader(out)
		if err != nil || int(got) != id {
			t.Fatalf("header id %d, %v; want %d", got, err, id)
		}
		return body
	}

	t.Run("avro", func(t *testing.T) {
		id := register("orders-value", sr.Schema{Schema: orderAvro, Type: sr.TypeAvro})
		out, err := encode(Config{Format: FormatAvro}, "orders", `{`+orderBase+`, "note": "n1"}`)
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]any
		if err := avro.Unmarshal(avro.MustParse(orderAvro), header(out, id), &got); err != nil {
			t.Fatal(err)
		}
		if got["id"] != int64(7) || got["status"] != "NEW" || got["note"] != "n1" {
			t.Errorf("decoded %v", got)
		}
		_, err = encode(Config{Format: FormatAvro}, "orders", `{"id": "7"}`)
		wantPayloadError(t, err, "$.id", "expected an integer (long)")
	})
	t.Run("protobuf", func(t *testing.T) {
		moneyID := register("money", sr.Schema{Schema: moneyProto, Type: sr.TypeProtobuf})
		_ = moneyID
		id := register("shipments-value", sr.Schema{Schema: orderProto, Type: sr.TypeProtobuf,
			References: []sr.SchemaReference{{Name: "money.proto", Subject: "money", Version: 1}}})
		out, err := encode(Config{Format: FormatProtobuf}, "shipments", `{"id": "9", "total": {"currency": "EUR", "units": 3}}`)
		if err != nil {
			t.Fatal(err)
		}
		index, msg, err := ParseIndex(header(out, id))
		if err != nil || len(index) != 1 || index[0] != 0 {
			t.Fatalf("index %v, %v", index, err)
		}
		pc, err := newProtoCodec(orderProto, []reference{{"money.proto", moneyProto}}, "")
		if err != nil {
			t.Fatal(err)
		}
		m := dynamicpb.NewMessage(pc.md)
		if err := proto.Unmarshal(msg, m); err != nil {
			t.Fatal(err)
		}
		if got := m.Get(pc.md.Fields().ByName("id")).Int(); got != 9 {
			t.Errorf("id %d, want 9", got)
		}
	})
	t.Run("json-schema", func(t *testing.T) {
		register("line", sr.Schema{Schema: lineJSONSchema, Type: sr.TypeJSON})
		id := register("lines-value", sr.Schema{Schema: orderJSONSchema, Type: sr.TypeJSON,
			References: []sr.SchemaReference{{Name: "line.json", Subject: "line", Version: 1}}})
		doc := `{"id": 1, "status": "PAID", "lines": [{"sku": "a"}]}`
		out, err := encode(Config{Format: FormatJSONSchema}, "lines", doc)
		if err != nil {
			t.Fatal(err)
		}
		if string(header(out, id)) != doc {
			t.Errorf("body %q, want the payload", out)
		}
		_, err = encode(Config{Format: FormatJSONSchema}, "lines", `{"id": 1, "status": "PAID", "lines": [{"sku": 1}]}`)
		wantPayloadError(t, err, "$.lines[0].sku", "want string")
	})
	t.Run("pre-encoded", func(t *testing.T) {
		id := register("raw-value", sr.Schema{Schema: idAvro, Type: sr.TypeAvro})
		rec := append(AppendHeader(nil, uint32(id), nil), 0x0e)
		out, err := encode(Config{Format: FormatPreEncoded}, "raw", string(rec))
		if err != nil || string(out) != string(rec) {
			t.Fatalf("pre-encoded: %q, %v; want it as it is", out, err)
		}
		_, err = encode(Config{Format: FormatPreEncoded}, "raw", string(AppendHeader(nil, 99999, nil)))
		wantPayloadError(t, err, "$", "schema id 99999 does not exist in the registry")
	})
	t.Run("unknown subject", func(t *testing.T) {
		_, err := encode(Config{Format: FormatAvro}, "nothing", `{}`)
		wantRegistryError(t, err, ErrRegistryRefused, `subject "nothing-value"`, "register the schema")
	})
	t.Run("inferred", func(t *testing.T) {
		e, err := NewEncoder(Config{Format: FormatAvro, Source: Inferred}, cl, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range []string{`{"a": 1}`, `{"a": 2}`, `{"a": 3, "b": "x"}`} {
			if _, err := e.Encode(ctx, nil, "inferred", []byte(doc)); err != nil {
				t.Fatalf("%s: %v", doc, err)
			}
		}
		vs, err := admin.SubjectVersions(ctx, "inferred-value")
		if err != nil || len(vs) != 2 {
			t.Errorf("versions %v (%v), want two: one per shape", vs, err)
		}
		// An int field turned string: incompatible under BACKWARD, so the
		// registry answers 409 and walbox stops naming the level.
		_, err = e.Encode(ctx, nil, "inferred", []byte(`{"a": "one"}`))
		wantRegistryError(t, err, ErrRegistryRefused, `subject "inferred-value"`, "HTTP 409", "the registry's BACKWARD", `"connect.name":"payload"`)
	})
	t.Run("pinned version that does not exist", func(t *testing.T) {
		_, err := encode(Config{Format: FormatAvro, Version: 5}, "orders", `{}`)
		wantRegistryError(t, err, ErrRegistryRefused, `subject "orders-value" version 5`)
	})
}
