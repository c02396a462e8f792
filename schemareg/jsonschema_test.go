package schemareg

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

const orderJSONSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "type": "object",
  "properties": {
    "id": {"type": "integer"},
    "status": {"enum": ["NEW", "PAID"]},
    "lines": {"type": "array", "items": {"$ref": "line.json"}}
  },
  "required": ["id", "status"],
  "additionalProperties": false
}`

const lineJSONSchema = `{"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]}`

func TestJSONSchemaEncode(t *testing.T) {
	f := newFake(t)
	f.register(t, "line", sr.TypeJSON, lineJSONSchema)
	id := f.register(t, "orders-value", sr.TypeJSON, orderJSONSchema,
		sr.SchemaReference{Name: "line.json", Subject: "line", Version: 1})
	e, _ := newTestEncoder(t, f, Config{Format: FormatJSONSchema})

	tests := []struct {
		name    string
		doc     string
		path    string
		problem []string
	}{
		{name: "valid", doc: `{"id": 1, "status": "NEW", "lines": [{"sku": "a"}]}`},
		{name: "string where an integer is", doc: `{"id": "1", "status": "NEW"}`, path: "$.id", problem: []string{"got string, want integer"}},
		{name: "missing required", doc: `{"id": 1}`, path: "$", problem: []string{"missing property 'status'"}},
		{name: "unknown enum value", doc: `{"id": 1, "status": "GONE"}`, path: "$.status", problem: []string{"value must be one of"}},
		{name: "referenced schema", doc: `{"id": 1, "status": "NEW", "lines": [{"sku": "a"}, {"sku": 2}]}`,
			path: "$.lines[1].sku", problem: []string{"want string"}},
		{name: "additional property", doc: `{"id": 1, "status": "NEW", "x": 1}`, path: "$", problem: []string{"additional properties 'x' not allowed"}},
		{name: "not JSON", doc: `{`, path: "$", problem: []string{"not valid JSON"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := e.Encode(context.Background(), nil, "orders", []byte(tt.doc))
			if tt.path != "" {
				wantPayloadError(t, err, tt.path, tt.problem...)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotID, body, err := ParseHeader(out)
			if err != nil || int(gotID) != id || string(body) != tt.doc {
				t.Fatalf("record %q (id %d, %v), want id %d and the payload as written", out, gotID, err, id)
			}
		})
	}
}
