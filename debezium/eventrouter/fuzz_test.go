package eventrouter

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/router"
)

// FuzzRoute feeds arbitrary column bytes (and NULLs) to Route under
// several configurations: it must never panic, an error must be an invalid
// row (never a caller bug, since the tuple matches its relation), and a
// record must be well formed: a valid topic, the context and id headers
// first, and JSON wherever JsonConverter wrote it.
func FuzzRoute(f *testing.F) {
	f.Add("9f1a2b3c-0000-4000-8000-000000000001", "order", "42", "OrderCreated", `{"a":[1,2.5,{"b":null}]}`, "2026-11-30 23:59:58.987654", uint8(0))
	f.Add("x", "", "", "", "", "", uint8(0xff))
	f.Add("id", "a b", "k", "t", `[{"a":1},{"b":2}]`, "infinity", uint8(0x0f))
	f.Add("id", "ok", "k", "t", `{"n": 123456789012345678901234567890}`, "1999-01-02 03:04:05", uint8(0x30))
	f.Add("id", "ok", "k", "t", `{"x": [[1],["a"]], "y": [null, null]}`, "", uint8(0x05))
	configs := []func(*Config){
		nil,
		func(c *Config) { c.ExpandJSONPayload = true },
		func(c *Config) {
			c.ExpandJSONPayload = true
			c.JSONPayloadNullBehavior = "optional_bytes"
			c.ValueConverter = ConverterConfig{Kind: JSONConverter}
		},
		func(c *Config) {
			c.KeyConverter = ConverterConfig{Kind: StringConverter}
			c.ValueConverter = ConverterConfig{Kind: StringConverter}
			c.ExpandJSONPayload = true
			c.TombstoneOnEmptyPayload = true
		},
		func(c *Config) {
			c.AdditionalPlacement = []Placement{
				{Column: "type", Location: "envelope", Alias: "t"},
				{Column: "ts", Location: "header"},
			}
			c.EventTimestampColumn = "ts"
			c.ExpandJSONPayload = true
		},
	}
	routers := make([]*Router, len(configs))
	for i, mod := range configs {
		r, err := New(testConfig(mod))
		if err != nil {
			f.Fatal(err)
		}
		routers[i] = r
	}
	f.Fuzz(func(t *testing.T, id, aggType, aggID, typ, payload, ts string, nulls uint8) {
		vals := []string{id, aggType, aggID, typ, payload, ts}
		cols := []col{
			{name: "id", oid: oidUUID, key: true},
			{name: "aggregatetype", oid: oidVarchar},
			{name: "aggregateid", oid: oidText},
			{name: "type", oid: oidVarchar},
			{name: "payload", oid: oidJSONB},
			{name: "ts", oid: oidTimestamp},
		}
		for i := range cols {
			if nulls&(1<<i) == 0 {
				cols[i].value = &vals[i]
			}
		}
		for i, r := range routers {
			got, err := r.Route(insert(cols))
			if err != nil {
				if !errors.Is(err, router.ErrInvalidRow) {
					t.Fatalf("config %d: error %v is not an invalid row", i, err)
				}
				continue
			}
			rec := got.Record
			if why := topicProblem(rec.Topic); why != "" {
				t.Fatalf("config %d: topic %q: %s", i, rec.Topic, why)
			}
			if len(rec.Headers) < 5 || rec.Headers[0].Key != HeaderConnectorLogicalName || rec.Headers[4].Key != HeaderID {
				t.Fatalf("config %d: headers %v", i, showHeaders(rec.Headers))
			}
			if r.cfg.KeyConverter.Kind == JSONConverter && rec.Key != nil && !json.Valid(rec.Key) {
				t.Fatalf("config %d: key %q is not JSON", i, rec.Key)
			}
			if r.cfg.ValueConverter.Kind == JSONConverter && rec.Value != nil && !json.Valid(rec.Value) {
				t.Fatalf("config %d: value %q is not JSON", i, rec.Value)
			}
		}
	})
}

// TestRouteNeverMisreadsTuples checks the caller-bug errors Route keeps
// apart from invalid rows.
func TestRouteNeverMisreadsTuples(t *testing.T) {
	r, err := New(testConfig(nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Route(nil); err == nil || errors.Is(err, router.ErrInvalidRow) {
		t.Fatalf("nil insert: %v", err)
	}
	ins := insert(canonical(str("{}")))
	ins.Values = ins.Values[:2]
	if _, err := r.Route(ins); err == nil || errors.Is(err, router.ErrInvalidRow) {
		t.Fatalf("short tuple: %v", err)
	}
	ins = insert(canonical(str("{}")))
	ins.Values[4] = decoder.Value{Kind: decoder.KindUnchangedToast}
	if _, err := r.Route(ins); !errors.Is(err, router.ErrInvalidRow) {
		t.Fatalf("TOAST payload: %v, want an invalid row", err)
	}
}
