package schemareg_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walbox/walbox/schemareg"
)

// The consumer of docs/schema-registry.md, as it stands there (between the
// markers; TestConsumerDocIsThisCode keeps the two equal).

// --- consumer ---

// Order is the Go form of the registered Avro record.
type Order struct {
	N      int    `avro:"n"`
	Status string `avro:"status"`
}

// decodeOrder decodes a record value walbox sent: franz-go's sr.Serde finds
// the schema id in the header, and a schema met for the first time is read
// from the registry and kept.
func decodeOrder(ctx context.Context, registry *sr.Client, serde *sr.Serde, value []byte) (Order, error) {
	var o Order
	err := serde.Decode(value, &o)
	if !errors.Is(err, sr.ErrNotRegistered) {
		return o, err
	}
	id, _, err := serde.DecodeID(value)
	if err != nil {
		return o, err
	}
	s, err := registry.SchemaByID(ctx, id)
	if err != nil {
		return o, err
	}
	schema, err := avro.Parse(s.Schema)
	if err != nil {
		return o, err
	}
	serde.Register(id, Order{}, sr.DecodeFn(func(b []byte, v any) error {
		return avro.Unmarshal(schema, b, v)
	}))
	return o, serde.Decode(value, &o)
}

// --- end of consumer ---

// TestConsumer: what walbox encodes, the documented consumer decodes.
func TestConsumer(t *testing.T) {
	reg := srfake.New()
	defer reg.Close()
	if _, _, err := reg.RegisterSchema("orders-value", sr.Schema{Schema: `{"type": "record", "name": "Order", "fields": [
		{"name": "n", "type": "int"}, {"name": "status", "type": "string"}]}`}); err != nil {
		t.Fatal(err)
	}
	cl, err := schemareg.NewClient(schemareg.ClientConfig{URLs: []string{reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := schemareg.NewEncoder(schemareg.Config{Format: schemareg.FormatAvro}, cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	registry, err := sr.NewClient(sr.URLs(reg.URL()))
	if err != nil {
		t.Fatal(err)
	}
	var serde sr.Serde
	for i, doc := range []string{`{"n": 1, "status": "NEW"}`, `{"n": 2, "status": "PAID"}`} {
		value, err := enc.Encode(context.Background(), nil, "orders", []byte(doc))
		if err != nil {
			t.Fatal(err)
		}
		o, err := decodeOrder(context.Background(), registry, &serde, value)
		if err != nil {
			t.Fatal(err)
		}
		if got := fmt.Sprint(o); got != fmt.Sprint(Order{N: i + 1, Status: []string{"NEW", "PAID"}[i]}) {
			t.Errorf("record %d decodes to %s", i, got)
		}
	}
}

// TestConsumerDocIsThisCode: the consumer in docs/schema-registry.md is the
// code TestConsumer runs.
func TestConsumerDocIsThisCode(t *testing.T) {
	src, err := os.ReadFile("consumer_test.go")
	if err != nil {
		t.Fatal(err)
	}
	code := string(src)
	code = code[strings.Index(code, "// --- consumer ---\n")+len("// --- consumer ---\n"):]
	code = strings.TrimSpace(code[:strings.Index(code, "// --- end of consumer ---")])
	doc, err := os.ReadFile("../docs/schema-registry.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)## A Go consumer.*?```go\n(.*?)```").FindSubmatch(doc)
	if m == nil {
		t.Fatal("docs/schema-registry.md has no Go consumer block")
	}
	if got := strings.TrimSpace(string(m[1])); got != code {
		t.Errorf("the consumer in docs/schema-registry.md differs from consumer_test.go's:\n%s", got)
	}
}
