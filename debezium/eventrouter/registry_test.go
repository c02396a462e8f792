package eventrouter

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/schemareg"
)

const orderAvro = `{"type":"record","name":"Order","namespace":"shop","fields":[{"name":"n","type":"long"},{"name":"status","type":"string"}]}`

// registryRouter is an EventRouter whose value (and, with key, key)
// converter is a registry converter against a fake registry holding
// orderAvro under outbox.event.order-value and "string" under
// outbox.event.order-key.
func registryRouter(t *testing.T, expand, key bool, mod func(*Config)) (*Router, *srfake.Registry) {
	t.Helper()
	f := srfake.New()
	t.Cleanup(f.Close)
	for subject, s := range map[string]string{"outbox.event.order-value": orderAvro, "outbox.event.order-key": `"string"`, "outbox.event.text-value": `"string"`} {
		if _, _, err := f.RegisterSchema(subject, sr.Schema{Schema: s}); err != nil {
			t.Fatal(err)
		}
	}
	cl, err := schemareg.NewClient(schemareg.ClientConfig{URLs: []string{f.URL()}, RetryBudget: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	values, err := schemareg.NewEncoder(schemareg.Config{Format: schemareg.FormatAvro}, cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(testConfig(func(c *Config) {
		c.ExpandJSONPayload = expand
		c.KeyConverter = ConverterConfig{Kind: StringConverter}
		c.ValueConverter = ConverterConfig{Kind: RegistryConverter}
		c.Values = values
		if key {
			keys, err := schemareg.NewKeyEncoder(schemareg.Config{Format: schemareg.FormatAvro}, cl, nil)
			if err != nil {
				t.Fatal(err)
			}
			c.KeyConverter, c.Keys = ConverterConfig{Kind: RegistryConverter}, keys
		}
		if mod != nil {
			mod(c)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	return r, f
}

func decodeAvro(t *testing.T, schema string, value []byte, v any) uint32 {
	t.Helper()
	id, body, err := schemareg.ParseHeader(value)
	if err != nil {
		t.Fatalf("value %x: %v", value, err)
	}
	if err := avro.Unmarshal(avro.MustParse(schema), body, v); err != nil {
		t.Fatalf("decode %x: %v", body, err)
	}
	return id
}

// TestRouteRegistryConverter: with a registry converter the payload is
// encoded with the registered schema (its JSON read against it with
// table.expand.json.payload, its text as a string without), the headers
// and topic stay Debezium's, and a payload that does not fit is an invalid
// row naming the row and the field.
func TestRouteRegistryConverter(t *testing.T) {
	r, _ := registryRouter(t, true, true, nil)
	got, err := r.Route(insert(canonical(str(`{"n": 7, "status": "new"}`))))
	if err != nil {
		t.Fatal(err)
	}
	var o struct {
		N      int64  `avro:"n"`
		Status string `avro:"status"`
	}
	decodeAvro(t, orderAvro, got.Record.Value, &o)
	if o.N != 7 || o.Status != "new" || got.Record.Topic != "outbox.event.order" || got.EventID != eventID {
		t.Errorf("record %+v, decoded %+v", got.Record, o)
	}
	var k string
	decodeAvro(t, `"string"`, got.Record.Key, &k)
	if k != "42" {
		t.Errorf("key %q", k)
	}
	if h := got.Record.Headers; len(h) != 5 || h[4].Key != HeaderID || string(h[4].Value) != eventID {
		t.Errorf("headers %v", h)
	}

	// Without expansion the value is the payload's text, as a string.
	r, _ = registryRouter(t, false, false, nil)
	cols := canonical(str(`{"n": 7}`))
	cols[1].value = str("text")
	got, err = r.Route(insert(cols))
	if err != nil {
		t.Fatal(err)
	}
	var s string
	decodeAvro(t, `"string"`, got.Record.Value, &s)
	if s != `{"n": 7}` || string(got.Record.Key) != "42" {
		t.Errorf("value %q key %q", s, got.Record.Key)
	}

	// A payload that breaks the schema: an invalid row naming the row.
	r, _ = registryRouter(t, true, false, nil)
	_, err = r.Route(insert(canonical(str(`{"n": "seven", "status": "new"}`))))
	var ire *router.InvalidRowError
	if !errors.As(err, &ire) || ire.EventID != eventID || ire.Column != "payload" || ire.LSN != 0x16B3748 ||
		!strings.Contains(ire.Reason, `"outbox.event.order-value"`) || !strings.Contains(ire.Reason, "$.n") {
		t.Fatalf("invalid payload: %v", err)
	}
	// ... or a dead-letter record with the reason.
	r, _ = registryRouter(t, true, false, func(c *Config) { c.DeadLetterTopic = "dlq" })
	got, err = r.Route(insert(canonical(str(`{"n": 1}`))))
	if err != nil || !got.DeadLetter || got.Record.Topic != "dlq" || string(got.Record.Value) != `{"n": 1}` ||
		!strings.Contains(got.Reason, "status") {
		t.Fatalf("dead letter: %+v, %v", got, err)
	}
	// The registry gone: not an invalid row, but an error naming the row,
	// so the relay confirms nothing past it.
	r, f := registryRouter(t, true, false, nil)
	f.Close()
	_, err = r.Route(insert(canonical(str(`{"n": 1, "status": "x"}`))))
	if err == nil || errors.As(err, &ire) || !errors.Is(err, schemareg.ErrRegistryUnavailable) || !strings.Contains(err.Error(), eventID) {
		t.Fatalf("registry down: %v", err)
	}
}

// TestNewRegistryConverterRefusals: an envelope placement cannot be
// encoded with the payload's schema, and a registry converter without an
// encoder is a programming error.
func TestNewRegistryConverterRefusals(t *testing.T) {
	_, err := New(testConfig(func(c *Config) {
		c.ValueConverter = ConverterConfig{Kind: RegistryConverter}
		c.AdditionalPlacement = []Placement{{Column: "type", Location: "envelope"}}
	}))
	if err == nil || !strings.Contains(err.Error(), "place those columns in headers") || !strings.Contains(err.Error(), "no encoder") {
		t.Fatalf("got %v", err)
	}
}
