package schemareg

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"math/big"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"
)

// avroCodec encodes JSON payloads with one Avro schema.
//
// The JSON value is first checked against the schema and turned into the
// Go values hamba/avro encodes, by the plain JSON mapping outbox writers use
// (as Debezium's JSON converter writes them): a record is an object, every
// field of the schema present or given a default, no other field; int and
// long are JSON integers in range (no fraction, no exponent, no string);
// float and double are JSON numbers; bytes and fixed are base64 strings; an
// enum is one of its symbols; a union takes its value plainly (null, or the
// first branch the value fits) or wrapped as {"branch name": value}, as
// Avro's own JSON encoding writes it; a decimal is a JSON number or a
// string holding one, with no more fraction digits than its scale.
type avroCodec struct {
	schema avro.Schema
	// defaults holds each record field's default, converted once when the
	// schema is compiled (read-only after).
	defaults map[*avro.Field]any
	// fast is the fast path (avrofast.go), nil when the schema has none.
	fast *avroFast
}

func newAvroCodec(text string, refs []reference) (*avroCodec, error) {
	cache := &avro.SchemaCache{}
	for _, r := range refs {
		if _, err := avro.ParseWithCache(r.text, "", cache); err != nil {
			return nil, fmt.Errorf("referenced schema %q: %w", r.name, err)
		}
	}
	s, err := avro.ParseWithCache(text, "", cache)
	if err != nil {
		return nil, err
	}
	c := &avroCodec{schema: s, defaults: map[*avro.Field]any{}}
	if err := c.collectDefaults(s, map[avro.Schema]bool{}); err != nil {
		return nil, err
	}
	if fast, err := newAvroFast(s, c.defaults); err == nil {
		c.fast = fast
	}
	return c, nil
}

// collectDefaults converts the default of every field of every record s
// reaches, each record once (a schema may refer to itself).
func (c *avroCodec) collectDefaults(s avro.Schema, seen map[avro.Schema]bool) error {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if seen[s] {
		return nil
	}
	seen[s] = true
	switch s := s.(type) {
	case *avro.RecordSchema:
		for _, f := range s.Fields() {
			if f.HasDefault() {
				v, _, problem := avroDefault(f)
				if problem != "" {
					return errors.New("field " + f.Name() + " of " + s.FullName() + ": " + problem)
				}
				c.defaults[f] = v
			}
			if err := c.collectDefaults(f.Type(), seen); err != nil {
				return err
			}
		}
	case *avro.ArraySchema:
		return c.collectDefaults(s.Items(), seen)
	case *avro.MapSchema:
		return c.collectDefaults(s.Values(), seen)
	case *avro.UnionSchema:
		for _, t := range s.Types() {
			if err := c.collectDefaults(t, seen); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *avroCodec) encode(dst, doc []byte) ([]byte, string, string) {
	if c.fast != nil {
		if out, ok := c.fast.encode(dst, doc); ok {
			return out, "", ""
		}
	}
	return c.check(dst, doc)
}

// check is the checking path: it encodes doc, or says what is wrong with
// it (the fast path leaves every payload it does not take to it).
func (c *avroCodec) check(dst, doc []byte) ([]byte, string, string) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return dst, "$", "not valid JSON: " + err.Error()
	}
	if dec.More() {
		return dst, "$", "not valid JSON: more than one value"
	}
	native, path, problem := avroValueD(c.schema, v, "$", c.defaults)
	if problem != "" {
		return dst, path, problem
	}
	body, err := avro.Marshal(c.schema, native)
	if err != nil {
		// The value was checked above; an error here is a case the check
		// does not know, still never produced.
		return dst, "$", "the Avro encoder refused the value: " + err.Error()
	}
	return append(dst, body...), "", ""
}

// jsonKind names a decoded JSON value's type for messages.
func jsonKind(v any) string {
	switch v := v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "the number " + string(v)
	case string:
		if len(v) > 40 {
			v = v[:40] + "..."
		}
		return "the string " + strconv.Quote(v)
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// avroValue checks v against s and returns the value hamba/avro encodes,
// or the path and problem; missing fields' defaults are converted on the
// spot (defaults themselves, when compiling).
func avroValue(s avro.Schema, v any, path string) (any, string, string) {
	return avroValueD(s, v, path, nil)
}

// avroValueD is avroValue with the defaults converted beforehand.
func avroValueD(s avro.Schema, v any, path string, defaults map[*avro.Field]any) (any, string, string) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	want := func(what string) (any, string, string) {
		return nil, path, "expected " + what + ", got " + jsonKind(v)
	}
	switch s := s.(type) {
	case *avro.PrimitiveSchema:
		if s.Logical() != nil && s.Logical().Type() == avro.Decimal {
			return avroDecimal(s.Logical(), v, path)
		}
		switch s.Type() {
		case avro.Null:
			if v != nil {
				return want("null")
			}
			return nil, "", ""
		case avro.Boolean:
			b, ok := v.(bool)
			if !ok {
				return want("a boolean")
			}
			return b, "", ""
		case avro.Int, avro.Long:
			n, ok := v.(json.Number)
			if !ok {
				return want("an integer (" + string(s.Type()) + ")")
			}
			bits := 64
			if s.Type() == avro.Int {
				bits = 32
			}
			i, err := strconv.ParseInt(string(n), 10, bits)
			if err != nil {
				if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
					return nil, path, "the number " + string(n) + " is out of range for an Avro " + string(s.Type()) +
						" (" + strconv.Itoa(bits) + "-bit signed integer)"
				}
				return nil, path, "expected an integer (" + string(s.Type()) + "), got the number " + string(n) + " (a fraction or exponent is not an integer)"
			}
			if bits == 32 {
				return int32(i), "", ""
			}
			return i, "", ""
		case avro.Float, avro.Double:
			n, ok := v.(json.Number)
			if !ok {
				return want("a number (" + string(s.Type()) + ")")
			}
			f, err := strconv.ParseFloat(string(n), 64)
			if err != nil {
				return nil, path, "the number " + string(n) + " is out of range for an Avro " + string(s.Type())
			}
			if s.Type() == avro.Float {
				if math.Abs(f) > math.MaxFloat32 {
					return nil, path, "the number " + string(n) + " is out of range for an Avro float (32-bit)"
				}
				return float32(f), "", ""
			}
			return f, "", ""
		case avro.String:
			str, ok := v.(string)
			if !ok {
				return want("a string")
			}
			return str, "", ""
		case avro.Bytes:
			str, ok := v.(string)
			if !ok {
				return want("a base64 string (bytes)")
			}
			b, err := base64.StdEncoding.DecodeString(str)
			if err != nil {
				return nil, path, "expected a base64 string (bytes): " + err.Error()
			}
			return b, "", ""
		}
	case *avro.RecordSchema:
		obj, ok := v.(map[string]any)
		if !ok {
			return want("an object (record " + s.FullName() + ")")
		}
		out := make(map[string]any, len(s.Fields()))
		present := 0
		for _, f := range s.Fields() {
			fp := path + "." + f.Name()
			fv, ok := obj[f.Name()]
			if !ok {
				if !f.HasDefault() {
					return nil, fp, "missing required field " + strconv.Quote(f.Name()) + " (record " + s.FullName() + "; it has no default)"
				}
				if dv, ok := defaults[f]; ok {
					out[f.Name()] = dv
					continue
				}
				dv, p, problem := avroDefault(f)
				if problem != "" {
					return nil, p, problem
				}
				out[f.Name()] = dv
				continue
			}
			present++
			nv, p, problem := avroValueD(f.Type(), fv, fp, defaults)
			if problem != "" {
				return nil, p, problem
			}
			out[f.Name()] = nv
		}
		if len(obj) > present {
			for _, k := range slices.Sorted(maps.Keys(obj)) {
				if _, ok := out[k]; !ok {
					return nil, path + "." + k, "unknown field " + strconv.Quote(k) + ": record " + s.FullName() + " has no such field"
				}
			}
		}
		return out, "", ""
	case *avro.EnumSchema:
		str, ok := v.(string)
		if !ok {
			return want("a symbol of enum " + s.FullName())
		}
		for _, sym := range s.Symbols() {
			if sym == str {
				return str, "", ""
			}
		}
		return nil, path, "unknown symbol " + strconv.Quote(str) + " of enum " + s.FullName() + " (symbols: " + strings.Join(s.Symbols(), ", ") + ")"
	case *avro.ArraySchema:
		arr, ok := v.([]any)
		if !ok {
			return want("an array")
		}
		out := make([]any, len(arr))
		for i, e := range arr {
			nv, p, problem := avroValueD(s.Items(), e, path+"["+strconv.Itoa(i)+"]", defaults)
			if problem != "" {
				return nil, p, problem
			}
			out[i] = nv
		}
		return out, "", ""
	case *avro.MapSchema:
		obj, ok := v.(map[string]any)
		if !ok {
			return want("an object (map)")
		}
		out := make(map[string]any, len(obj))
		for k, e := range obj {
			nv, p, problem := avroValueD(s.Values(), e, path+"["+strconv.Quote(k)+"]", defaults)
			if problem != "" {
				return nil, p, problem
			}
			out[k] = nv
		}
		return out, "", ""
	case *avro.FixedSchema:
		if s.Logical() != nil && s.Logical().Type() == avro.Decimal {
			r, p, problem := avroDecimal(s.Logical(), v, path)
			if problem != "" {
				return nil, p, problem
			}
			return r, "", ""
		}
		str, ok := v.(string)
		if !ok {
			return want("a base64 string (fixed " + s.FullName() + ")")
		}
		b, err := base64.StdEncoding.DecodeString(str)
		if err != nil {
			return nil, path, "expected a base64 string (fixed " + s.FullName() + "): " + err.Error()
		}
		if len(b) != s.Size() {
			return nil, path, "fixed " + s.FullName() + " holds " + strconv.Itoa(s.Size()) + " bytes, got " + strconv.Itoa(len(b))
		}
		return fixedArray(b), "", ""
	case *avro.UnionSchema:
		return avroUnion(s, v, path, defaults)
	}
	return nil, path, "schema type " + string(s.Type()) + " is not supported"
}

// fixedArray returns b as the [N]byte hamba/avro encodes a fixed from.
func fixedArray(b []byte) any {
	arr := reflect.New(reflect.ArrayOf(len(b), reflect.TypeFor[byte]())).Elem()
	reflect.Copy(arr, reflect.ValueOf(b))
	return arr.Interface()
}

// avroUnion picks the branch for v: the wrapped form {"name": value} when v
// is a one-key object naming a branch (and no record or map branch takes the
// object as it is), else null for null, else the first branch v fits.
func avroUnion(s *avro.UnionSchema, v any, path string, defaults map[*avro.Field]any) (any, string, string) {
	types := s.Types()
	if v == nil {
		if _, pos := types.Get("null"); pos >= 0 {
			return nil, "", ""
		}
		return nil, path, "null is not allowed: the union has no null branch"
	}
	if obj, ok := v.(map[string]any); ok && len(obj) == 1 {
		for name, inner := range obj {
			if b, pos := types.Get(name); pos >= 0 {
				nv, p, problem := avroValueD(b, inner, path, defaults)
				if problem != "" {
					return nil, p, problem
				}
				return wrapUnion(b, nv), "", ""
			}
		}
	}
	var first struct{ path, problem string }
	for _, b := range types {
		if b.Type() == avro.Null {
			continue
		}
		nv, p, problem := avroValueD(b, v, path, defaults)
		if problem == "" {
			return wrapUnion(b, nv), "", ""
		}
		if first.problem == "" {
			first.path, first.problem = p, problem
		}
	}
	if first.problem == "" {
		return nil, path, "expected null, got " + jsonKind(v)
	}
	if len(types) == 2 && types[0].Type() == avro.Null || len(types) == 1 {
		return nil, first.path, first.problem
	}
	return nil, path, "the value fits no branch of the union (the first non-null branch: " + first.problem + " at " + first.path + ")"
}

// wrapUnion gives hamba/avro a union value it can resolve unambiguously.
func wrapUnion(b avro.Schema, v any) any {
	return map[string]any{unionName(b): v}
}

// unionName is hamba/avro's name for a union branch: the full name of a
// named type, else the type with its logical type ("long.timestamp-millis").
func unionName(s avro.Schema) string {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if n, ok := s.(avro.NamedSchema); ok {
		return n.FullName()
	}
	name := string(s.Type())
	if l, ok := s.(avro.LogicalTypeSchema); ok && l.Logical() != nil {
		name += "." + string(l.Logical().Type())
	}
	return name
}

// avroDefault converts a field's default through the same checks, so a
// default takes the form a value would (for a union, its first branch).
func avroDefault(f *avro.Field) (any, string, string) {
	d := f.Default()
	t := f.Type()
	if u, ok := t.(*avro.UnionSchema); ok {
		t = u.Types()[0]
		if d == nil || t.Type() == avro.Null {
			return nil, "", ""
		}
	}
	if native, ok := byteDefault(t, d); ok {
		return native, "", ""
	}
	b, err := json.Marshal(d)
	if err != nil {
		return nil, "$", "the default of field " + strconv.Quote(f.Name()) + " cannot be used: " + err.Error()
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, "$", "the default of field " + strconv.Quote(f.Name()) + " cannot be used: " + err.Error()
	}
	nv, p, problem := avroValue(t, v, "default of "+f.Name())
	if problem != "" {
		return nil, p, problem
	}
	if _, ok := f.Type().(*avro.UnionSchema); ok {
		return wrapUnion(t, nv), "", ""
	}
	return nv, "", ""
}

// avroDecimal reads a decimal as a JSON number or a string holding one.
func avroDecimal(l avro.LogicalSchema, v any, path string) (*big.Rat, string, string) {
	var text string
	switch v := v.(type) {
	case json.Number:
		text = string(v)
	case string:
		text = v
	default:
		return nil, path, "expected a decimal number, got " + jsonKind(v)
	}
	r, ok := new(big.Rat).SetString(text)
	if !ok || strings.ContainsAny(text, "/") {
		return nil, path, "expected a decimal number, got " + strconv.Quote(text)
	}
	d, _ := l.(*avro.DecimalLogicalSchema)
	if d != nil {
		scaled := new(big.Rat).Mul(r, new(big.Rat).SetInt(new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(d.Scale())), nil)))
		if !scaled.IsInt() {
			return nil, path, "the decimal " + text + " has more fraction digits than the scale " + strconv.Itoa(d.Scale())
		}
		if d.Precision() > 0 {
			digits := len(strings.TrimLeft(new(big.Int).Abs(scaled.Num()).String(), "0"))
			if digits > d.Precision() {
				return nil, path, "the decimal " + text + " has more digits than the precision " + strconv.Itoa(d.Precision())
			}
		}
	}
	return r, "", ""
}

// byteDefault converts the defaults hamba/avro parses into bytes (bytes,
// fixed and their decimals), which JSON would turn into base64 or arrays.
func byteDefault(t avro.Schema, d any) (any, bool) {
	if ref, ok := t.(*avro.RefSchema); ok {
		t = ref.Schema()
	}
	var raw []byte
	switch v := reflect.ValueOf(d); {
	case v.Kind() == reflect.Slice && v.Type().Elem().Kind() == reflect.Uint8:
		raw = v.Bytes()
	case v.Kind() == reflect.Array && v.Type().Elem().Kind() == reflect.Uint8:
		raw = make([]byte, v.Len())
		reflect.Copy(reflect.ValueOf(raw), v)
	default:
		return nil, false
	}
	var logical avro.LogicalSchema
	if l, ok := t.(avro.LogicalTypeSchema); ok {
		logical = l.Logical()
	}
	if dec, ok := logical.(*avro.DecimalLogicalSchema); ok {
		// Two's-complement big-endian unscaled value.
		n := new(big.Int).SetBytes(raw)
		if len(raw) > 0 && raw[0]&0x80 != 0 {
			n.Sub(n, new(big.Int).Lsh(big.NewInt(1), uint(8*len(raw))))
		}
		return new(big.Rat).SetFrac(n, new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(dec.Scale())), nil)), true
	}
	if t.Type() == avro.Fixed {
		return fixedArray(raw), true
	}
	return raw, true
}
