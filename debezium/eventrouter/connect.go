package eventrouter

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file models the part of Kafka Connect's data API that Debezium's
// records pass through (org.apache.kafka.connect.data.Schema, Struct) and
// writes it the way the converters do: JsonConverter with and without
// schemas (Jackson's compact output), StringConverter (Java's toString) and
// SimpleHeaderConverter (Values.convertToString).

// kind is a Connect schema type.
type kind uint8

const (
	kString kind = iota
	kInt16
	kInt32
	kInt64
	kFloat64
	kBool
	kBytes
	kStruct
	kArray
)

var kindNames = [...]string{
	kString: "string", kInt16: "int16", kInt32: "int32", kInt64: "int64",
	kFloat64: "double", kBool: "boolean", kBytes: "bytes", kStruct: "struct", kArray: "array",
}

func (k kind) String() string { return kindNames[k] }

// schema is a Connect schema. Schemas are built once and never modified, so
// they may be shared.
type schema struct {
	typ      kind
	optional bool
	name     string // "" for none
	version  int    // 0 for none
	fields   []field
	items    *schema // array element schema
	// def is the default value (a column's DEFAULT as Debezium parsed
	// it); nil for none. Struct.get returns it for a null field.
	def any

	// jsonMemo is appendSchemaJSON's output, kept since schemas are not
	// modified once a record used them and column schemas serve every row.
	jsonMemo []byte
}

type field struct {
	name   string
	schema *schema
}

// fieldIndex returns the position of the named field, or -1.
func (s *schema) fieldIndex(name string) int {
	for i, f := range s.fields {
		if f.name == name {
			return i
		}
	}
	return -1
}

// equal reports whether a and b are the same schema (Connect's
// ConnectSchema.equals, for the attributes this package sets).
func (a *schema) equal(b *schema) bool {
	if a == b {
		return true
	}
	if a == nil || b == nil || a.typ != b.typ || a.optional != b.optional ||
		a.name != b.name || a.version != b.version || len(a.fields) != len(b.fields) || a.def != b.def {
		return false
	}
	for i := range a.fields {
		if a.fields[i].name != b.fields[i].name || !a.fields[i].schema.equal(b.fields[i].schema) {
			return false
		}
	}
	if (a.items == nil) != (b.items == nil) {
		return false
	}
	return a.items == nil || a.items.equal(b.items)
}

// Values are Go values of these types, matching the Java types Debezium
// puts into a Struct:
//
//	nil        null
//	string     String
//	int16/int32/int64  Short/Integer/Long
//	float64    Double
//	bool       Boolean
//	[]byte     ByteBuffer (bytea)
//	*structVal Struct
//	[]any      List
type structVal struct {
	schema *schema
	values []any // by field position; nil is null
}

// errConversion is a JsonConverter DataException: the value does not fit
// its schema. Route reports it as an invalid row, as Connect fails the task.
var errConversion = errors.New("conversion error")

// appendJSONEnvelope writes {"schema":...,"payload":...} as JsonConverter
// with schemas.enable=true does.
func appendJSONEnvelope(dst []byte, s *schema, v any) ([]byte, error) {
	dst = append(dst, `{"schema":`...)
	if s == nil {
		dst = append(dst, "null"...)
	} else {
		dst = appendSchemaJSON(dst, s)
	}
	dst = append(dst, `,"payload":`...)
	dst, err := appendValueJSON(dst, s, v)
	if err != nil {
		return nil, err
	}
	return append(dst, '}'), nil
}

// appendSchemaJSON writes JsonConverter.asJsonSchema: type, fields or
// items, optional, name, version (doc, parameters and default are never set
// by the schemas this package builds).
func appendSchemaJSON(dst []byte, s *schema) []byte {
	if s.jsonMemo == nil {
		s.jsonMemo = buildSchemaJSON(nil, s)
	}
	return append(dst, s.jsonMemo...)
}

func buildSchemaJSON(dst []byte, s *schema) []byte {
	dst = append(dst, `{"type":"`...)
	dst = append(dst, s.typ.String()...)
	dst = append(dst, '"')
	switch s.typ {
	case kStruct:
		dst = append(dst, `,"fields":[`...)
		for i, f := range s.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			inner := appendSchemaJSON(nil, f.schema)
			dst = append(dst, inner[:len(inner)-1]...) // the field name goes last
			dst = append(dst, `,"field":`...)
			dst = appendJSONString(dst, f.name)
			dst = append(dst, '}')
		}
		dst = append(dst, ']')
	case kArray:
		dst = append(dst, `,"items":`...)
		dst = appendSchemaJSON(dst, s.items)
	}
	dst = append(dst, `,"optional":`...)
	dst = strconv.AppendBool(dst, s.optional)
	if s.name != "" {
		dst = append(dst, `,"name":`...)
		dst = appendJSONString(dst, s.name)
	}
	if s.version != 0 {
		dst = append(dst, `,"version":`...)
		dst = strconv.AppendInt(dst, int64(s.version), 10)
	}
	if s.def != nil {
		dst = append(dst, `,"default":`...)
		dst, _ = appendValueJSON(dst, s, s.def) // a default always fits its schema
	}
	return append(dst, '}')
}

// appendValueJSON writes JsonConverter.convertToJson(schema, value).
func appendValueJSON(dst []byte, s *schema, v any) ([]byte, error) {
	if v == nil && s != nil && s.def != nil {
		v = s.def // replace.null.with.default=true, Kafka's default
	}
	if v == nil {
		if s != nil && !s.optional {
			return dst, errConversionf("null value for field that is required and has no default value")
		}
		return append(dst, "null"...), nil
	}
	if s == nil {
		return appendInferredJSON(dst, v)
	}
	switch s.typ {
	case kString:
		x, ok := v.(string)
		if !ok {
			return dst, mismatch(s, v)
		}
		return appendJSONString(dst, x), nil
	case kInt16, kInt32, kInt64:
		n, ok := intOf(v)
		if !ok {
			return dst, mismatch(s, v)
		}
		return strconv.AppendInt(dst, n, 10), nil
	case kFloat64:
		f, ok := v.(float64)
		if !ok {
			return dst, mismatch(s, v)
		}
		return appendJSONDouble(dst, f), nil
	case kBool:
		b, ok := v.(bool)
		if !ok {
			return dst, mismatch(s, v)
		}
		return strconv.AppendBool(dst, b), nil
	case kBytes:
		b, ok := v.([]byte)
		if !ok {
			return dst, mismatch(s, v)
		}
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, b)
		return append(dst, '"'), nil
	case kArray:
		l, ok := v.([]any)
		if !ok {
			return dst, mismatch(s, v)
		}
		dst = append(dst, '[')
		for i, e := range l {
			if i > 0 {
				dst = append(dst, ',')
			}
			var err error
			if dst, err = appendValueJSON(dst, s.items, e); err != nil {
				return dst, err
			}
		}
		return append(dst, ']'), nil
	case kStruct:
		st, ok := v.(*structVal)
		if !ok || !st.schema.equal(s) {
			return dst, mismatch(s, v)
		}
		dst = append(dst, '{')
		for i, f := range s.fields {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendJSONString(dst, f.name)
			dst = append(dst, ':')
			var err error
			if dst, err = appendValueJSON(dst, f.schema, st.values[i]); err != nil {
				return dst, err
			}
		}
		return append(dst, '}'), nil
	}
	return dst, mismatch(s, v)
}

// appendInferredJSON is convertToJson with a null schema, which infers the
// JSON type from the Java class of the value.
func appendInferredJSON(dst []byte, v any) ([]byte, error) {
	switch x := v.(type) {
	case string:
		return appendJSONString(dst, x), nil
	case bool:
		return strconv.AppendBool(dst, x), nil
	case float64:
		return appendJSONDouble(dst, x), nil
	case []byte:
		dst = append(dst, '"')
		dst = base64.StdEncoding.AppendEncode(dst, x)
		return append(dst, '"'), nil
	}
	if n, ok := intOf(v); ok {
		return strconv.AppendInt(dst, n, 10), nil
	}
	return dst, errConversionf("cannot infer a JSON type for %T without a schema", v)
}

func intOf(v any) (int64, bool) {
	switch x := v.(type) {
	case int16:
		return int64(x), true
	case int32:
		return int64(x), true
	case int64:
		return x, true
	}
	return 0, false
}

func mismatch(s *schema, v any) error {
	return errConversionf("value of Java type %s does not match schema type %s", javaClass(v), s.typ)
}

func errConversionf(format string, args ...any) error {
	return &conversionError{msg: fmt.Sprintf(format, args...)}
}

type conversionError struct{ msg string }

func (e *conversionError) Error() string {
	return "Kafka Connect " + errConversion.Error() + ": " + e.msg
}
func (e *conversionError) Unwrap() error { return errConversion }

func javaClass(v any) string {
	switch v.(type) {
	case string:
		return "String"
	case int16:
		return "Short"
	case int32:
		return "Integer"
	case int64:
		return "Long"
	case float64:
		return "Double"
	case bool:
		return "Boolean"
	case []byte:
		return "ByteBuffer"
	case *structVal:
		return "Struct"
	case []any:
		return "List"
	}
	return "Object"
}

// appendJSONString writes s as Jackson does: quotes, backslashes and
// control characters escaped (\b \t \n \f \r short, others \u00XX with
// upper-case hex), characters beyond U+FFFF as escaped surrogate pairs,
// everything else, other non-ASCII included, as UTF-8.
func appendJSONString(dst []byte, s string) []byte {
	const hex = "0123456789ABCDEF"
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == 0xed {
			// A surrogate that is not half of a pair (only the JSON
			// payload's \u escapes make one, see str): escaped, as Jackson
			// writes every surrogate.
			if u := wtf8Surrogate(s, i); u != 0 {
				dst = append(dst, s[start:i]...)
				dst = append(dst, '\\', 'u', hex[u>>12&0xf], hex[u>>8&0xf], hex[u>>4&0xf], hex[u&0xf])
				i += 2
				start = i + 1
			}
			continue
		}
		if c >= 0xf0 {
			// A character beyond the Basic Multilingual Plane: Jackson's
			// UTF-8 generator writes its UTF-16 surrogate pair escaped.
			r, size := utf8.DecodeRuneInString(s[i:])
			if size == 4 {
				dst = append(dst, s[start:i]...)
				hi, lo := utf16.EncodeRune(r)
				for _, u := range []rune{hi, lo} {
					dst = append(dst, '\\', 'u', hex[u>>12&0xf], hex[u>>8&0xf], hex[u>>4&0xf], hex[u&0xf])
				}
				i += size - 1
				start = i + 1
			}
			continue
		}
		if c >= 0x20 && c != '"' && c != '\\' {
			continue
		}
		dst = append(dst, s[start:i]...)
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
		start = i + 1
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}

// appendJavaDouble writes f as Java's Double.toString: plain decimal with
// at least one fractional digit for 1e-3 <= |f| < 1e7, otherwise
// "d.dddE[-]n"; the digits are the shortest that round-trip.
func appendJavaDouble(dst []byte, f float64) []byte {
	switch {
	case math.IsNaN(f):
		return append(dst, "NaN"...)
	case math.IsInf(f, 1):
		return append(dst, "Infinity"...)
	case math.IsInf(f, -1):
		return append(dst, "-Infinity"...)
	case f == 0:
		if math.Signbit(f) {
			return append(dst, "-0.0"...)
		}
		return append(dst, "0.0"...)
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest digits and decimal exponent: d.ddd × 10^exp.
	e := strconv.AppendFloat(nil, f, 'e', -1, 64)
	mant, expPart := e, []byte(nil)
	for i, c := range e {
		if c == 'e' {
			mant, expPart = e[:i], e[i+1:]
			break
		}
	}
	exp, _ := strconv.Atoi(string(expPart))
	digits := make([]byte, 0, len(mant))
	for _, c := range mant {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	if f >= 1e-3 && f < 1e7 {
		if exp >= 0 {
			intLen := exp + 1
			for len(digits) < intLen {
				digits = append(digits, '0')
			}
			dst = append(dst, digits[:intLen]...)
			dst = append(dst, '.')
			if frac := digits[intLen:]; len(frac) > 0 {
				return append(dst, frac...)
			}
			return append(dst, '0')
		}
		dst = append(dst, '0', '.')
		for i := 0; i < -exp-1; i++ {
			dst = append(dst, '0')
		}
		return append(dst, digits...)
	}
	dst = append(dst, digits[0], '.')
	if len(digits) > 1 {
		dst = append(dst, digits[1:]...)
	} else {
		dst = append(dst, '0')
	}
	dst = append(dst, 'E')
	return strconv.AppendInt(dst, int64(exp), 10)
}

// appendJSONDouble writes f as Jackson does: a number, or for NaN and the
// infinities the string Double.toString gives (QUOTE_NON_NUMERIC_NUMBERS,
// on by default), since JSON has no such numbers.
func appendJSONDouble(dst []byte, f float64) []byte {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return appendJSONString(dst, string(appendJavaDouble(nil, f)))
	}
	return appendJavaDouble(dst, f)
}

// javaString is value.toString() as StringConverter calls it, encoded as
// its String.getBytes(UTF_8) encodes: a lone surrogate becomes '?'.
func javaString(v any) string {
	b := appendJavaString(nil, v)
	if bytes.IndexByte(b, 0xed) >= 0 {
		s := string(b)
		b = b[:0]
		for i := 0; i < len(s); i++ {
			if wtf8Surrogate(s, i) != 0 {
				b = append(b, '?')
				i += 2
				continue
			}
			b = append(b, s[i])
		}
	}
	return string(b)
}

func appendJavaString(dst []byte, v any) []byte {
	switch x := v.(type) {
	case nil:
		return append(dst, "null"...)
	case string:
		return append(dst, x...)
	case bool:
		return strconv.AppendBool(dst, x)
	case float64:
		return appendJavaDouble(dst, x)
	case []byte:
		// Debezium hands bytea over as a heap ByteBuffer.
		dst = append(dst, "java.nio.HeapByteBuffer[pos=0 lim="...)
		dst = strconv.AppendInt(dst, int64(len(x)), 10)
		dst = append(dst, " cap="...)
		dst = strconv.AppendInt(dst, int64(len(x)), 10)
		return append(dst, ']')
	case []any:
		dst = append(dst, '[')
		for i, e := range x {
			if i > 0 {
				dst = append(dst, ',', ' ')
			}
			dst = appendJavaString(dst, e)
		}
		return append(dst, ']')
	case *structVal:
		dst = append(dst, "Struct{"...)
		first := true
		for i, f := range x.schema.fields {
			if x.values[i] == nil {
				continue
			}
			if !first {
				dst = append(dst, ',')
			}
			first = false
			dst = append(dst, f.name...)
			dst = append(dst, '=')
			dst = appendJavaString(dst, x.values[i])
		}
		return append(dst, '}')
	}
	if n, ok := intOf(v); ok {
		return strconv.AppendInt(dst, n, 10)
	}
	return dst
}

// headerValue is SimpleHeaderConverter.fromConnectHeader: nil for null,
// otherwise Values.convertToString (bytes as Base64).
func headerValue(v any) []byte {
	switch x := v.(type) {
	case nil:
		return nil
	case []byte:
		return base64.StdEncoding.AppendEncode(make([]byte, 0, base64.StdEncoding.EncodedLen(len(x))), x)
	case string:
		return []byte(x)
	}
	return appendJavaString(nil, v)
}

// javaTrimEmpty reports whether Java's s.trim().isEmpty() holds: every
// character is <= U+0020.
func javaTrimEmpty(s string) bool {
	for _, r := range s {
		if r > ' ' {
			return false
		}
	}
	return true
}
