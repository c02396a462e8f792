package schemareg

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
)

func newInferredEncoder(t *testing.T, f *fakeRegistry) *Encoder {
	t.Helper()
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro, Source: Inferred})
	return e
}

// TestInferredSchemas checks each of Debezium's inference rules (as
// JsonSchemaData applies them) and Apicurio's AvroData conversion, by the
// schema text registered, and that the record decodes to the payload as
// Debezium expands it.
func TestInferredSchemas(t *testing.T) {
	const (
		n = `"null",`
		d = `,"default":null}`
	)
	for _, tc := range []struct {
		name, payload, schema string
		// decoded is the record decoded with the schema, as JSON ("" is
		// the payload itself).
		decoded string
	}{
		{"scalars", `{"s":"x","b":true,"i":7,"l":3000000000,"f":1.5,"e":1e2,"neg":-2147483648}`,
			`{"type":"record","name":"payload","fields":[` +
				`{"name":"s","type":[` + n + `"string"]` + d + `,` +
				`{"name":"b","type":[` + n + `"boolean"]` + d + `,` +
				`{"name":"i","type":[` + n + `"int"]` + d + `,` +
				`{"name":"l","type":[` + n + `"long"]` + d + `,` +
				`{"name":"f","type":[` + n + `"double"]` + d + `,` +
				`{"name":"e","type":[` + n + `"double"]` + d + `,` +
				`{"name":"neg","type":[` + n + `"int"]` + d +
				`],"connect.name":"payload"}`,
			`{"s":"x","b":true,"i":7,"l":3000000000,"f":1.5,"e":100,"neg":-2147483648}`},
		{"null and empty array dropped", `{"a":null,"b":[],"c":1}`,
			`{"type":"record","name":"payload","fields":[{"name":"c","type":[` + n + `"int"]` + d + `],"connect.name":"payload"}`,
			`{"c":1}`},
		{"nested objects named by path", `{"customer":{"name":"Ada","address":{"zip":"1000"}}}`,
			`{"type":"record","name":"payload","fields":[{"name":"customer","type":[` + n +
				`{"type":"record","name":"customer","namespace":"payload","fields":[` +
				`{"name":"name","type":[` + n + `"string"]` + d + `,` +
				`{"name":"address","type":[` + n + `{"type":"record","name":"address","namespace":"payload.customer","fields":[` +
				`{"name":"zip","type":[` + n + `"string"]` + d + `],"connect.name":"payload.customer.address"}]` + d +
				`],"connect.name":"payload.customer"}]` + d + `],"connect.name":"payload"}`, ""},
		{"empty object", `{"o":{}}`,
			`{"type":"record","name":"payload","fields":[{"name":"o","type":[` + n +
				`{"type":"record","name":"o","namespace":"payload","fields":[],"connect.name":"payload.o"}]` + d + `],"connect.name":"payload"}`, ""},
		{"array of scalars, null elements kept", `{"tags":["a",null,"b"]}`,
			`{"type":"record","name":"payload","fields":[{"name":"tags","type":[` + n +
				`{"type":"array","items":[` + n + `"string"]}]` + d + `],"connect.name":"payload"}`, ""},
		{"array of records of one shape: optional items", `{"lines":[{"sku":"a"},null,{"sku":"b"}]}`,
			`{"type":"record","name":"payload","fields":[{"name":"lines","type":[` + n +
				`{"type":"array","items":[` + n + `{"type":"record","name":"lines","namespace":"payload","fields":[` +
				`{"name":"sku","type":[` + n + `"string"]` + d + `],"connect.name":"payload.lines"}]}]` + d + `],"connect.name":"payload"}`, ""},
		// Two shapes: Debezium's merge builds a struct that is not optional.
		{"array of records merged in order, required items", `{"lines":[{"sku":"a","qty":1},{"sku":"b","note":"x"},{"sku":"c","qty":2}]}`,
			`{"type":"record","name":"payload","fields":[{"name":"lines","type":[` + n +
				`{"type":"array","items":{"type":"record","name":"lines","namespace":"payload","fields":[` +
				`{"name":"sku","type":[` + n + `"string"]` + d + `,` +
				`{"name":"qty","type":[` + n + `"int"]` + d + `,` +
				`{"name":"note","type":[` + n + `"string"]` + d +
				`],"connect.name":"payload.lines"}}]` + d + `],"connect.name":"payload"}`,
			`{"lines":[{"sku":"a","qty":1,"note":null},{"sku":"b","qty":null,"note":"x"},{"sku":"c","qty":2,"note":null}]}`},
		{"array of arrays of records unnamed", `{"m":[[{"x":1}],[{"x":2}]],"k":[[{"x":3}]]}`,
			`{"type":"record","name":"payload","fields":[` +
				`{"name":"m","type":[` + n + `{"type":"array","items":[` + n + `{"type":"array","items":[` + n +
				`{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":[{"name":"x","type":[` + n + `"int"]` + d + `]}]}]}]` + d + `,` +
				`{"name":"k","type":[` + n + `{"type":"array","items":[` + n + `{"type":"array","items":[` + n +
				`"io.confluent.connect.avro.ConnectDefault"]}]}]` + d +
				`],"connect.name":"payload"}`, ""},
		// A record without a path inside an unnamed one: namespace "",
		// which hamba/avro reads as the enclosing one.
		{"record inside an unnamed record", `{"r":[[{"o":{"z":true}}]]}`,
			`{"type":"record","name":"payload","fields":[{"name":"r","type":[` + n + `{"type":"array","items":[` + n + `{"type":"array","items":[` + n +
				`{"type":"record","name":"ConnectDefault","namespace":"io.confluent.connect.avro","fields":[{"name":"o","type":[` + n +
				`{"type":"record","name":"o","namespace":"","fields":[{"name":"z","type":[` + n + `"boolean"]` + d + `],"connect.name":"o"}]` + d +
				`]}]}]}]` + d + `],"connect.name":"payload"}`, ""},
		{"repeated key keeps its place and last value", `{"a":1,"b":"x","a":2}`,
			`{"type":"record","name":"payload","fields":[{"name":"a","type":[` + n + `"int"]` + d + `,{"name":"b","type":[` + n + `"string"]` + d + `],"connect.name":"payload"}`,
			`{"a":2,"b":"x"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			e := newInferredEncoder(t, f)
			out, err := e.Encode(context.Background(), nil, "orders", []byte(tc.payload))
			if err != nil {
				t.Fatal(err)
			}
			ss, err := newTestClient(t, f.URL()).SchemaByVersion(context.Background(), "orders-value", -1)
			if err != nil {
				t.Fatal(err)
			}
			if ss.Schema.Schema != tc.schema {
				t.Errorf("schema\n%s\nwant\n%s", ss.Schema.Schema, tc.schema)
			}
			if out[0] != 0 || int(binary.BigEndian.Uint32(out[1:5])) != ss.ID {
				t.Fatalf("header % x, want magic 0 and id %d", out[:5], ss.ID)
			}
			want := tc.decoded
			if want == "" {
				want = tc.payload
			}
			if got := decodeInferred(t, tc.schema, out[5:]); !jsonEqual(t, got, want) {
				t.Errorf("decoded %s, want %s", got, want)
			}
		})
	}
}

// decodeInferred decodes an inferred record to JSON, the union wrappers
// taken off.
func decodeInferred(t *testing.T, schema string, body []byte) string {
	t.Helper()
	s, err := avro.ParseWithCache(schema, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := avro.Unmarshal(s, body, &v); err != nil {
		t.Fatalf("decode: %v", err)
	}
	b, err := json.Marshal(unwrapUnions(v))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// unwrapUnions takes off the {"branch": value} maps hamba/avro decodes a
// union's arrays and records into (the tests' records are named payload...,
// body... or ConnectDefault...).
func unwrapUnions(v any) any {
	switch v := v.(type) {
	case map[string]any:
		if len(v) == 1 {
			for k, inner := range v {
				if k == "array" || strings.HasPrefix(k, "payload") || strings.HasPrefix(k, "body") || strings.Contains(k, "ConnectDefault") || strings.HasSuffix(k, ".o") {
					return unwrapUnions(inner)
				}
			}
		}
		out := map[string]any{}
		for k, e := range v {
			out[k] = unwrapUnions(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = unwrapUnions(e)
		}
		return out
	}
	return v
}

func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal([]byte(a), &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &y); err != nil {
		t.Fatal(err)
	}
	xb, _ := json.Marshal(x)
	yb, _ := json.Marshal(y)
	return bytes.Equal(xb, yb)
}

// TestInferredEncodingIsJavas checks the bytes of a record against what
// Java's Avro writes for it: unions by index, arrays in one block with the
// item count and no byte size (hamba/avro's default would write a negative
// count and the size).
func TestInferredEncodingIsJavas(t *testing.T) {
	f := newFake(t)
	e := newInferredEncoder(t, f)
	out, err := e.Encode(context.Background(), nil, "orders", []byte(`{"n":[1,2],"s":"é"}`))
	if err != nil {
		t.Fatal(err)
	}
	want := []byte{
		0x02,       // n: the array branch
		0x04,       // a block of 2 items
		0x02, 0x02, // [int] 1 (zig-zag 2)
		0x02, 0x04, // [int] 2
		0x00,                   // end of the array
		0x02, 0x04, 0xc3, 0xa9, // s: string of 2 bytes
	}
	if got := out[5:]; !bytes.Equal(got, want) {
		t.Errorf("body % x, want % x", got, want)
	}
}

// TestInferredRefused checks the payloads Debezium's expansion (or
// Apicurio's converter) fails on are invalid rows naming the path and why.
func TestInferredRefused(t *testing.T) {
	for _, tc := range []struct {
		name, payload, path string
		want                []string
	}{
		{"mixed array", `{"a":[1,"x"]}`, "$.a[1]", []string{"Field is not a homogenous array (1 x STRING)"}},
		{"mixed number types", `{"a":[1,1.5]}`, "$.a[1]", []string{"Field is not a homogenous array (1 x 1.5), different number types (INT32 x FLOAT64)"}},
		{"int and long", `{"a":[1,3000000000]}`, "$.a[1]", []string{"different number types (INT32 x INT64)"}},
		{"objects and scalars", `{"a":[{"x":1},2]}`, "$.a[1]", []string{"not a homogenous array"}},
		{"all null elements", `{"a":[null,null]}`, "$.a", []string{"unrecognized member schema"}},
		{"array of empty arrays", `{"a":[[]]}`, "$.a", []string{"unrecognized member schema"}},
		{"integer beyond 64 bits", `{"a":123456789012345678901234}`, "$.a", []string{"does not fit 64 bits"}},
		{"elements disagree on a field's type", `{"a":[{"x":1},{"x":"y"}]}`, "$.a[1].x", []string{"expected int32", `"y"`}},
		{"elements disagree on int and long", `{"a":[{"x":1},{"x":3000000000}]}`, "$.a[1].x", []string{"expected int32"}},
		{"nested shape Debezium would drop", `{"a":[{"o":{"x":1}},{"o":{"y":2}}]}`, "$.a[1].o.y", []string{"drops it silently"}},
		{"null element among records of two shapes", `{"a":[{"x":1},{"y":2},null]}`, "$.a[2]", []string{"not optional"}},
		{"top-level array", `[1]`, "$", []string{"JSON object"}},
		{"leading space", ` {"a":1}`, "$", []string{"starting with '{'"}},
		{"invalid field name", `{"first-name":"x"}`, "$.first-name", []string{"not a valid Avro name"}},
		{"empty field name", `{"":1}`, "$.", []string{"empty"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake(t)
			e := newInferredEncoder(t, f)
			_, err := e.Encode(context.Background(), nil, "orders", []byte(tc.payload))
			wantPayloadError(t, err, tc.path, tc.want...)
		})
	}
}

// TestInferredCache checks the same payload shape is registered once and a
// new shape once more: steady state makes no registry request.
func TestInferredCache(t *testing.T) {
	f := newFake(t)
	e := newInferredEncoder(t, f)
	ctx := context.Background()
	for i, p := range []string{`{"a":1}`, `{"a":2}`, `{"a":3,"b":null}`, `{"a":4,"b":"x"}`, `{"a":5,"b":"y"}`} {
		if _, err := e.Encode(ctx, nil, "orders", []byte(p)); err != nil {
			t.Fatalf("payload %d: %v", i, err)
		}
	}
	if got := f.requests.Load(); got != 2 {
		t.Errorf("%d registry requests for two shapes, want 2", got)
	}
	vs, err := newTestClient(t, f.URL()).cl.SubjectVersions(ctx, "orders-value")
	if err != nil || len(vs) != 2 {
		t.Errorf("versions %v (%v), want 2", vs, err)
	}
}

// TestInferredIncompatible checks a 409 stops walbox naming the subject and
// the schema, not as an invalid row.
func TestInferredIncompatible(t *testing.T) {
	f := newFake(t)
	f.Intercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusConflict)
			_, _ = w.Write([]byte(`{"error_code":409,"message":"Schema being registered is incompatible with an earlier schema"}`))
			return true
		}
		return false
	})
	e := newInferredEncoder(t, f)
	_, err := e.Encode(context.Background(), nil, "orders", []byte(`{"a":1}`))
	wantRegistryError(t, err, ErrRegistryRefused, `subject "orders-value"`, "HTTP 409", "incompatible", `"connect.name":"payload"`)
}

// TestInferredConfig checks what the inferred source refuses.
func TestInferredConfig(t *testing.T) {
	for _, c := range []Config{
		{Format: FormatProtobuf, Source: Inferred},
		{Format: FormatAvro, Source: Inferred, Key: true},
		{Format: FormatAvro, Source: Inferred, Version: 2},
		{Format: FormatAvro, Source: Inferred, Strategy: RecordName, RecordName: "x.Y"},
		{Format: FormatAvro, Source: "guessed"},
		{Format: FormatAvro, PayloadColumn: "body"},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
	if err := (Config{Format: FormatAvro, Source: Inferred, PayloadColumn: "body"}).Validate(); err != nil {
		t.Error(err)
	}
}

// TestInferredRecordNamedAfterColumn checks the record is named after the
// payload column.
func TestInferredRecordNamedAfterColumn(t *testing.T) {
	f := newFake(t)
	e, _ := newTestEncoder(t, f, Config{Format: FormatAvro, Source: Inferred, PayloadColumn: "body"})
	if _, err := e.Encode(context.Background(), nil, "orders", []byte(`{"o":{"a":true}}`)); err != nil {
		t.Fatal(err)
	}
	ss, err := newTestClient(t, f.URL()).SchemaByVersion(context.Background(), "orders-value", -1)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"type":"record","name":"body","fields":[{"name":"o","type":["null",{"type":"record","name":"o","namespace":"body","fields":[{"name":"a","type":["null","boolean"],"default":null}],"connect.name":"body.o"}],"default":null}],"connect.name":"body"}`
	if ss.Schema.Schema != want {
		t.Errorf("schema\n%s\nwant\n%s", ss.Schema.Schema, want)
	}
	_ = sr.TypeAvro
}

// FuzzInferred: any payload is either refused with a path or encoded, and
// what is encoded decodes with the inferred schema; nothing panics.
func FuzzInferred(f *testing.F) {
	for _, doc := range jsonTreeSeeds {
		f.Add([]byte(doc))
	}
	f.Add([]byte(`{"a":[{"x":1},{"y":[1,2]},{"x":2,"z":{"w":null}}],"b":[[{"c":1}],[{"c":2}]],"d":{"e":{}}}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		if len(doc) == 0 || doc[0] != '{' {
			return
		}
		tree, err := parseJSONTree(doc)
		if err != nil {
			return
		}
		cs, ierr := inferSchema("payload", true, tree, "$")
		if ierr != nil {
			return
		}
		text, ierr := inferredAvro(cs)
		if ierr != nil {
			return
		}
		schema, err := avro.ParseWithCache(text, "", &avro.SchemaCache{})
		if err != nil {
			t.Fatalf("%q: the inferred schema does not compile: %v\n%s", doc, err, text)
		}
		native, ierr := inferredValue(cs, schema, tree, "$")
		if ierr != nil {
			return
		}
		body, err := inferredAvroConfig.Marshal(schema, native)
		if err != nil {
			t.Fatalf("%q: encode: %v", doc, err)
		}
		var v any
		if err := avro.Unmarshal(schema, body, &v); err != nil {
			t.Fatalf("%q: decode: %v", doc, err)
		}
	})
}
