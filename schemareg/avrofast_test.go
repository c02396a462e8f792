package schemareg

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math/rand/v2"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/hamba/avro/v2"
)

// The fast path (avrofast.go) must never encode what the checking path
// refuses, and must encode what it takes to the same bytes. These tests
// compare the two on generated payloads, valid and broken, over schemas
// that use every kind the fast path reads.

// fastSchemas are the schemas compared: orderAvro, the benchmark's, and
// ones for the kinds orderAvro leaves out.
var fastSchemas = map[string]string{
	"order": orderAvro,
	"bench": benchAvro,
	"kinds": `{"type": "record", "name": "K", "namespace": "k", "fields": [
  {"name": "a", "type": ["string", "null"], "default": "dflt"},
  {"name": "b", "type": ["null", {"type": "record", "name": "In", "fields": [
     {"name": "x", "type": "int"}, {"name": "y", "type": ["null", "long"], "default": null},
     {"name": "z", "type": {"type": "array", "items": "double"}, "default": [1.5, 2]}]}], "default": null},
  {"name": "c", "type": {"type": "map", "values": "In"}, "default": {}},
  {"name": "d", "type": {"type": "array", "items": ["null", "In"]}, "default": []},
  {"name": "e", "type": ["null", {"type": "bytes", "logicalType": "decimal", "precision": 4, "scale": 1}], "default": null},
  {"name": "f", "type": ["null", {"type": "fixed", "name": "F2", "size": 2}], "default": null},
  {"name": "g", "type": {"type": "fixed", "name": "FD", "size": 3, "logicalType": "decimal", "precision": 5, "scale": 2}, "default": "\u0000\u0000\u0001"},
  {"name": "h", "type": ["null", {"type": "enum", "name": "E", "symbols": ["A", "B", "string"]}], "default": null},
  {"name": "i", "type": ["null", "string", {"type": "array", "items": "int"}, {"type": "map", "values": "string"}, "In"], "default": null},
  {"name": "j", "type": {"type": "map", "values": {"type": "array", "items": "long"}}, "default": {"k": [1]}},
  {"name": "k", "type": "In", "default": {"x": 4}},
  {"name": "l", "type": {"type": "long", "logicalType": "timestamp-micros"}, "default": 0},
  {"name": "m", "type": {"type": "string", "logicalType": "uuid"}, "default": "u"},
  {"name": "n", "type": ["float", "null"], "default": 1.25},
  {"name": "o", "type": ["null", "boolean"], "default": null}
]}`,
	"string":         `"string"`,
	"nullable":       `["null", "string"]`,
	"array of maps":  `{"type": "array", "items": {"type": "map", "values": "int"}}`,
	"union top":      `["null", "long", "string", {"type": "record", "name": "R", "fields": [{"name": "v", "type": "long"}]}]`,
	"enum":           `{"type": "enum", "name": "Only", "symbols": ["X", "Y"]}`,
	"record no dflt": `{"type": "record", "name": "P", "fields": [{"name": "p", "type": "int"}, {"name": "q", "type": "boolean"}]}`,
}

// benchAvro is bench/avro.go's schema for the generator's payloads.
const benchAvro = `{"type": "record", "name": "Order", "namespace": "bench", "fields": [
  {"name": "aggregate_id", "type": "string"},
  {"name": "event_id", "type": "long"},
  {"name": "amount_cents", "type": "long"},
  {"name": "currency", "type": "string"},
  {"name": "status", "type": "string"},
  {"name": "customer", "type": {"type": "record", "name": "OrderCustomer", "fields": [
    {"name": "tier", "type": "string"}, {"name": "country", "type": "string"}]}},
  {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "OrderItem", "fields": [
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "long"}, {"name": "price_cents", "type": "long"}]}}},
  {"name": "note", "type": "string"}]}`

// benchPayload is the benchmark's payload as Postgres prints it back from
// jsonb (keys by length, then bytes; a space after ':' and ','), as walbox
// receives it.
var benchPayload = `{"note": "` + strings.Repeat("x", 60) + `", "items": [{"qty": 3, "sku": "SKU-48213", "price_cents": 45012}], ` +
	`"status": "confirmed", "currency": "EUR", "customer": {"tier": "gold", "country": "DE"}, "event_id": 1234567, ` +
	`"aggregate_id": "order-0042", "amount_cents": 734512}`

// TestAvroFastMatchesChecking: on generated payloads, whenever the fast
// path encodes, the checking path encodes too, to the same bytes; and the
// fast path takes every well-formed payload it is given.
func TestAvroFastMatchesChecking(t *testing.T) {
	for name, text := range fastSchemas {
		t.Run(name, func(t *testing.T) {
			c, err := newAvroCodec(text, nil)
			if err != nil {
				t.Fatal(err)
			}
			if c.fast == nil {
				t.Fatal("no fast path")
			}
			rng := rand.New(rand.NewPCG(1, uint64(len(name))))
			var valid, fast, checked int
			for i := range 3000 {
				g := &docGen{rng: rng}
				if i%2 == 1 {
					g.breakRate = 0.05
				}
				doc := g.value(c.schema, 0)
				ok, checkOK := compareFast(t, c, []byte(doc))
				for range 3 {
					compareFast(t, c, mangle(rng, []byte(doc)))
				}
				if g.broken == 0 && g.unsure == 0 {
					valid++
					if !checkOK {
						t.Fatalf("%s: a generated valid payload is refused: %s", doc, problemOf(c, doc))
					}
					if !ok {
						t.Fatalf("%s: the fast path does not take a valid payload", doc)
					}
				}
				if ok {
					fast++
				}
				if checkOK {
					checked++
				}
			}
			t.Logf("%d payloads well formed; %d encoded by the checking path, %d of them by the fast path", valid, checked, fast)
			if valid < 500 {
				t.Errorf("only %d valid payloads generated", valid)
			}
		})
	}
}

func problemOf(c *avroCodec, doc string) string {
	_, path, problem := c.check(nil, []byte(doc))
	return path + ": " + problem
}

// compareFast runs both paths on doc and fails t if the fast path encodes
// what the checking path refuses or encodes it otherwise.
func compareFast(t *testing.T, c *avroCodec, doc []byte) (fastOK, checkOK bool) {
	t.Helper()
	fastOut, ok := c.fast.encode([]byte("pre"), doc)
	checkOut, path, problem := c.check([]byte("pre"), doc)
	if !ok {
		if string(fastOut) != "pre" {
			t.Fatalf("%s: the fast path gave up but changed dst: %q", doc, fastOut)
		}
		return false, problem == ""
	}
	if !json.Valid(doc) {
		t.Fatalf("%q: the fast path encoded a payload that is not JSON", doc)
	}
	if problem != "" {
		t.Fatalf("%s: the fast path encoded a payload the checking path refuses (%s: %s)", doc, path, problem)
	}
	if bytes.Equal(fastOut, checkOut) {
		return true, true
	}
	// Maps are encoded in Go's map order: compare what the bytes hold.
	var fv, cv any
	if err := avro.Unmarshal(c.schema, fastOut[3:], &fv); err != nil {
		t.Fatalf("%s: the fast path's record does not decode: %v", doc, err)
	}
	if err := avro.Unmarshal(c.schema, checkOut[3:], &cv); err != nil {
		t.Fatalf("%s: the checking path's record does not decode: %v", doc, err)
	}
	if !reflect.DeepEqual(fv, cv) {
		t.Fatalf("%s: the paths encode differently:\nfast  %x %#v\ncheck %x %#v", doc, fastOut, fv, checkOut, cv)
	}
	return true, true
}

// mangle returns doc with its JSON syntax likely broken: cut short, a
// byte replaced, inserted or removed, or something appended.
func mangle(rng *rand.Rand, doc []byte) []byte {
	out := bytes.Clone(doc)
	at := rng.IntN(len(out) + 1)
	odd := []byte(",:{}[]\"\\ \x00\x01\x1f\x7f\xff0-.eEtfnu+")
	c := odd[rng.IntN(len(odd))]
	switch rng.IntN(6) {
	case 0:
		return out[:at]
	case 1:
		if at < len(out) {
			out[at] = c
		}
		return out
	case 2:
		return append(out[:at], append([]byte{c}, doc[at:]...)...)
	case 3:
		if at < len(out) {
			return append(out[:at], doc[at+1:]...)
		}
		return out
	case 4:
		return append(out, []string{" ]", " }", ",", " {}", "x", " \"\""}[rng.IntN(6)]...)
	}
	return append([]byte(" \ufeff"), out...)
}

// FuzzAvroFast: for any payload, against each schema, the fast path
// encodes only what the checking path encodes, to the same record; nothing
// panics.
func FuzzAvroFast(f *testing.F) {
	codecs := map[string]*avroCodec{}
	for name, text := range fastSchemas {
		c, err := newAvroCodec(text, nil)
		if err != nil {
			f.Fatal(err)
		}
		codecs[name] = c
	}
	for _, seed := range []string{
		`{` + orderBase + `}`, benchPayload, benchDoc,
		`{` + orderBase + `, "note": {"string": "w"}, "choice": {"long": 5}, "lines": [{"sku": "a", "n": 1}], "attrs": {"a": 1, "b": 2}}`,
		`{"a": {"string": "x"}, "b": {"x": 1, "z": []}, "c": {"k": {"x": 2}}, "d": [null, {"x": 3}], "e": "1.5", "f": "AAE=", "g": 1.25, "h": "string", "i": [1, 2], "n": null}`,
		`{"a": null, "b": {"k.In": {"x": 1}}, "i": {"a": "b"}, "i": {"k.In": {"x": 1}}, "h": {"k.E": "B"}}`,
		`{"b": {"x": 1, "x": 2}}`, `{"\u0061": "x"}`, `{"a": "\u00e9\ud800"}`, `"x"`, `null`, `[{"a": 1}, {}]`, `{"R": {"v": 1}}`,
		`{"p": 1, "q": true}`, `{"p": 1e0, "q": true}`, `{"p": -0, "q": false} `, `{"p": 01, "q": true}`,
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, doc string) {
		for _, c := range codecs {
			compareFast(t, c, []byte(doc))
		}
	})
}

// docGen writes JSON values for a schema, now and then broken in one of
// the ways payloads are (breakRate), or written in a form the fast path
// may leave to the checking path (unsure: a repeated or escaped key).
type docGen struct {
	rng       *rand.Rand
	breakRate float64
	broken    int
	unsure    int
}

func (g *docGen) maybe(p float64) bool { return g.rng.Float64() < p }

func (g *docGen) ws() string {
	return [...]string{"", "", " ", "\n ", "\t"}[g.rng.IntN(5)]
}

// junk is a value of another kind than asked.
func (g *docGen) junk() string {
	g.broken++
	return [...]string{`null`, `true`, `"s"`, `1`, `-1.5`, `1e3`, `[]`, `{}`, `[1, "a"]`, `{"x": 1}`, `9223372036854775808`, `"AA=="`}[g.rng.IntN(12)]
}

func (g *docGen) str() string {
	switch g.rng.IntN(8) {
	case 0:
		return `""`
	case 1:
		return `"\u00e9t\u00e9 \"q\" \\ \n"`
	case 2:
		return `"` + "caf\u00e9 \u6f22" + `"`
	case 3:
		return `"` + "\xff bad utf-8" + `"`
	case 4:
		return `"\ud83d\ude00 \ud800"`
	}
	return strconv.Quote("v" + strconv.Itoa(g.rng.IntN(1000)))
}

func (g *docGen) b64(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(g.rng.IntN(256))
	}
	return `"` + base64.StdEncoding.EncodeToString(b) + `"`
}

func (g *docGen) value(s avro.Schema, depth int) string {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if g.breakRate > 0 && g.maybe(g.breakRate) {
		return g.junk()
	}
	switch s := s.(type) {
	case *avro.NullSchema:
		return "null"
	case *avro.PrimitiveSchema:
		if l := s.Logical(); l != nil && l.Type() == avro.Decimal {
			d := l.(*avro.DecimalLogicalSchema)
			return g.decimal(d.Precision(), d.Scale())
		}
		switch s.Type() {
		case avro.Boolean:
			return [...]string{"true", "false"}[g.rng.IntN(2)]
		case avro.Int:
			return [...]string{"0", "-0", "7", "-2147483648", "2147483647", strconv.Itoa(g.rng.IntN(100000) - 50000)}[g.rng.IntN(6)]
		case avro.Long:
			return [...]string{"0", "9223372036854775807", "-9223372036854775808", strconv.FormatInt(g.rng.Int64(), 10), "12"}[g.rng.IntN(5)]
		case avro.Float:
			return [...]string{"0", "1.5", "-3.25e2", "3.4028234663852886e38", "1e-45", "7"}[g.rng.IntN(6)]
		case avro.Double:
			return [...]string{"0", "1.5", "-3.25E2", "1.7976931348623157e308", "5e-324", strconv.FormatFloat(g.rng.NormFloat64(), 'g', -1, 64)}[g.rng.IntN(6)]
		case avro.String:
			return g.str()
		case avro.Bytes:
			return g.b64(g.rng.IntN(5))
		}
	case *avro.EnumSchema:
		syms := s.Symbols()
		return strconv.Quote(syms[g.rng.IntN(len(syms))])
	case *avro.FixedSchema:
		if l := s.Logical(); l != nil && l.Type() == avro.Decimal {
			d := l.(*avro.DecimalLogicalSchema)
			return g.decimal(d.Precision(), d.Scale())
		}
		return g.b64(s.Size())
	case *avro.ArraySchema:
		if depth > 3 {
			return "[]"
		}
		parts := make([]string, g.rng.IntN(4))
		for i := range parts {
			parts[i] = g.ws() + g.value(s.Items(), depth+1)
		}
		return "[" + strings.Join(parts, ",") + g.ws() + "]"
	case *avro.MapSchema:
		if depth > 3 {
			return "{}"
		}
		n := g.rng.IntN(4)
		parts := make([]string, n)
		for i := range parts {
			key := strconv.Quote("k" + strconv.Itoa(g.rng.IntN(3)))
			if g.maybe(0.1) {
				key = `"k\u0031"`
			}
			parts[i] = g.ws() + key + ":" + g.ws() + g.value(s.Values(), depth+1)
		}
		return "{" + strings.Join(parts, ",") + "}"
	case *avro.UnionSchema:
		types := s.Types()
		b := types[g.rng.IntN(len(types))]
		if b.Type() == avro.Null {
			if g.maybe(0.1) {
				// The checking path refuses the wrapped null.
				g.broken++
				return `{"null": null}`
			}
			return "null"
		}
		v := g.value(b, depth)
		if g.maybe(0.3) {
			return `{"` + unionName(b) + `":` + g.ws() + v + `}`
		}
		// A plain value takes the first branch it fits: fine for the
		// comparison, whichever that is.
		return v
	case *avro.RecordSchema:
		var parts []string
		for _, f := range s.Fields() {
			if f.HasDefault() && g.maybe(0.4) {
				continue
			}
			if g.breakRate > 0 && g.maybe(g.breakRate/2) {
				g.broken++
				continue
			}
			key := strconv.Quote(f.Name())
			if g.maybe(0.02) {
				g.unsure++
				key = `"\u00` + strconv.FormatInt(int64(f.Name()[0]), 16) + f.Name()[1:] + `"`
			}
			parts = append(parts, g.ws()+key+g.ws()+":"+g.ws()+g.value(f.Type(), depth+1))
			if g.maybe(0.02) {
				g.unsure++
				parts = append(parts, key+":"+g.value(f.Type(), depth+1))
			}
		}
		if g.breakRate > 0 && g.maybe(g.breakRate) {
			g.broken++
			parts = append(parts, `"unknown_field": 1`)
		}
		g.rng.Shuffle(len(parts), func(i, j int) { parts[i], parts[j] = parts[j], parts[i] })
		return "{" + strings.Join(parts, ",") + g.ws() + "}"
	}
	return "null"
}

// decimal writes a decimal within precision and scale, as a number or a
// string.
func (g *docGen) decimal(precision, scale int) string {
	digits := 1 + g.rng.IntN(precision)
	n := g.rng.Int64N(pow10(digits))
	text := strconv.FormatInt(n, 10)
	for len(text) <= scale {
		text = "0" + text
	}
	if scale > 0 {
		text = text[:len(text)-scale] + "." + text[len(text)-scale:]
	}
	if g.maybe(0.5) {
		text = "-" + text
	}
	if g.maybe(0.5) {
		return `"` + text + `"`
	}
	return text
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}
