package eventrouter

import (
	"errors"
	"math"
	"math/big"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// This file reproduces table.expand.json.payload: Debezium parses the
// payload string with Jackson (JsonSchemaData) and replaces it with a
// Struct whose schema it infers from the document.

// jtype is a Jackson JsonNode type, with numbers split the way Jackson's
// default ObjectMapper reads them.
type jtype uint8

const (
	jNull jtype = iota
	jBool
	jInt    // IntNode: an integer that fits 32 bits
	jLong   // LongNode: an integer that fits 64 bits
	jBigInt // BigIntegerNode
	jDouble // DoubleNode: any number with a fraction or exponent
	jString
	jArray
	jObject
)

type jnode struct {
	typ   jtype
	b     bool
	i     int64
	f     float64
	s     string
	keys  []string // object members in first-occurrence order
	vals  []*jnode // a repeated key keeps its place and takes the last value
	elems []*jnode
	// index maps keys to their position once an object has more than
	// indexMembers of them: a linear search per member would make
	// parsing, inference and conversion quadratic in the members.
	index map[string]int
}

const indexMembers = 8

// member returns the position of key k in object n, or -1.
func (n *jnode) member(k string) int {
	if n.index != nil {
		if i, ok := n.index[k]; ok {
			return i
		}
		return -1
	}
	for i, have := range n.keys {
		if have == k {
			return i
		}
	}
	return -1
}

// setMember adds member k = v to object n, or replaces the value of a
// repeated key in its first place, as Jackson's ObjectNode does.
func (n *jnode) setMember(k string, v *jnode) {
	if i := n.member(k); i >= 0 {
		n.vals[i] = v
		return
	}
	n.keys, n.vals = append(n.keys, k), append(n.vals, v)
	switch {
	case n.index != nil:
		n.index[k] = len(n.keys) - 1
	case len(n.keys) > indexMembers:
		n.index = make(map[string]int, 2*len(n.keys))
		for i, have := range n.keys {
			n.index[have] = i
		}
	}
}

var errJSONSyntax = errors.New("not valid JSON")

// parseJackson reads the first JSON value of s as ObjectMapper.readTree
// does (content after it is not read).
func parseJackson(s string) (*jnode, error) {
	p := &jparser{s: s}
	return p.value(0)
}

type jparser struct {
	s   string
	pos int
}

// Jackson 2.21's default StreamReadConstraints, which Debezium's
// ObjectMapper applies: past any of them readTree throws, the expansion
// fails and the payload stays a string.
const (
	maxDepth        = 1000       // nested arrays and objects
	maxNumberLength = 1000       // digits of an integer; of a float's integer, fraction and exponent together
	maxStringLength = 20_000_000 // UTF-16 units of a string value
	maxNameLength   = 50_000     // UTF-16 units of an object member's name
)

// separator reads what follows a member or element: a comma (another one
// comes, end false) or the closing bracket (end true).
func (p *jparser) separator(closing byte) (end bool, err error) {
	p.ws()
	if p.pos >= len(p.s) {
		return false, errJSONSyntax
	}
	switch p.s[p.pos] {
	case ',':
		p.pos++
		return false, nil
	case closing:
		p.pos++
		return true, nil
	}
	return false, errJSONSyntax
}

func (p *jparser) ws() {
	for p.pos < len(p.s) {
		switch p.s[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value reads a value inside depth containers.
func (p *jparser) value(depth int) (*jnode, error) {
	p.ws()
	if p.pos >= len(p.s) {
		return nil, errJSONSyntax
	}
	switch c := p.s[p.pos]; {
	case c == '{':
		if depth >= maxDepth {
			return nil, errJSONSyntax
		}
		p.pos++
		n := &jnode{typ: jObject}
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == '}' {
			p.pos++
			return n, nil
		}
		for {
			p.ws()
			if p.pos >= len(p.s) || p.s[p.pos] != '"' {
				return nil, errJSONSyntax
			}
			k, err := p.str(maxNameLength)
			if err != nil {
				return nil, err
			}
			p.ws()
			if p.pos >= len(p.s) || p.s[p.pos] != ':' {
				return nil, errJSONSyntax
			}
			p.pos++
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.setMember(k, v)
			end, err := p.separator('}')
			if err != nil {
				return nil, err
			}
			if end {
				return n, nil
			}
		}
	case c == '[':
		if depth >= maxDepth {
			return nil, errJSONSyntax
		}
		p.pos++
		n := &jnode{typ: jArray}
		p.ws()
		if p.pos < len(p.s) && p.s[p.pos] == ']' {
			p.pos++
			return n, nil
		}
		for {
			v, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			n.elems = append(n.elems, v)
			end, err := p.separator(']')
			if err != nil {
				return nil, err
			}
			if end {
				return n, nil
			}
		}
	case c == '"':
		s, err := p.str(maxStringLength)
		return &jnode{typ: jString, s: s}, err
	case c == 't' || c == 'f' || c == 'n':
		for _, lit := range []string{"true", "false", "null"} {
			if len(p.s)-p.pos >= len(lit) && p.s[p.pos:p.pos+len(lit)] == lit {
				end := p.pos + len(lit)
				if end < len(p.s) && isIdentChar(p.s[end]) {
					return nil, errJSONSyntax
				}
				p.pos = end
				switch lit {
				case "true":
					return &jnode{typ: jBool, b: true}, nil
				case "false":
					return &jnode{typ: jBool}, nil
				}
				return &jnode{typ: jNull}, nil
			}
		}
		return nil, errJSONSyntax
	case c == '-' || c >= '0' && c <= '9':
		return p.number()
	}
	return nil, errJSONSyntax
}

func isIdentChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_'
}

func (p *jparser) number() (*jnode, error) {
	start := p.pos
	if p.s[p.pos] == '-' {
		p.pos++
	}
	digits := func() int {
		n := 0
		for p.pos < len(p.s) && p.s[p.pos] >= '0' && p.s[p.pos] <= '9' {
			p.pos++
			n++
		}
		return n
	}
	intStart := p.pos
	intLen := digits()
	if intLen == 0 {
		return nil, errJSONSyntax
	}
	length := intLen
	if p.s[intStart] == '0' && p.pos-intStart > 1 {
		return nil, errJSONSyntax // leading zeros
	}
	isFloat := false
	if p.pos < len(p.s) && p.s[p.pos] == '.' {
		p.pos++
		n := digits()
		if n == 0 {
			return nil, errJSONSyntax
		}
		isFloat, length = true, length+n
	}
	if p.pos < len(p.s) && (p.s[p.pos] == 'e' || p.s[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.s) && (p.s[p.pos] == '+' || p.s[p.pos] == '-') {
			p.pos++
		}
		n := digits()
		if n == 0 {
			return nil, errJSONSyntax
		}
		isFloat, length = true, length+n
	}
	if p.pos < len(p.s) && isIdentChar(p.s[p.pos]) {
		return nil, errJSONSyntax
	}
	if length > maxNumberLength {
		return nil, errJSONSyntax
	}
	text := p.s[start:p.pos]
	if isFloat {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return nil, errJSONSyntax
		}
		return &jnode{typ: jDouble, f: f}, nil
	}
	n, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		if _, ok := new(big.Int).SetString(text, 10); !ok {
			return nil, errJSONSyntax
		}
		return &jnode{typ: jBigInt, s: text}, nil
	}
	if n >= math.MinInt32 && n <= math.MaxInt32 {
		return &jnode{typ: jInt, i: n}, nil
	}
	return &jnode{typ: jLong, i: n}, nil
}

// str reads a string of at most limit UTF-16 units. A \u escape of a
// surrogate that is not half of a pair is kept, as the Java char it is,
// encoded as WTF-8 (the three bytes UTF-8 would give it), which
// appendJSONString writes escaped and javaString as '?', as Jackson and
// Java's UTF-8 encoder do.
func (p *jparser) str(limit int) (string, error) {
	p.pos++ // opening quote
	var out []byte
	start := p.pos
	for p.pos < len(p.s) {
		c := p.s[p.pos]
		switch {
		case c == '"':
			out = append(out, p.s[start:p.pos]...)
			p.pos++
			if len(out) > limit && utf16Len(out) > limit {
				return "", errJSONSyntax
			}
			return string(out), nil
		case c < 0x20:
			return "", errJSONSyntax
		case c == '\\':
			out = append(out, p.s[start:p.pos]...)
			p.pos++
			if p.pos >= len(p.s) {
				return "", errJSONSyntax
			}
			e := p.s[p.pos]
			p.pos++
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := p.hex4()
				if !ok {
					return "", errJSONSyntax
				}
				if utf16.IsSurrogate(r) && p.pos+6 <= len(p.s) && p.s[p.pos] == '\\' && p.s[p.pos+1] == 'u' {
					save := p.pos
					p.pos += 2
					if r2, ok := p.hex4(); ok && utf16.DecodeRune(r, r2) != utf8.RuneError {
						r = utf16.DecodeRune(r, r2)
					} else {
						p.pos = save
					}
				}
				out = appendWTF8(out, r)
			default:
				return "", errJSONSyntax
			}
			start = p.pos
		default:
			p.pos++
		}
	}
	return "", errJSONSyntax
}

// appendWTF8 appends r as UTF-8, a surrogate included.
func appendWTF8(b []byte, r rune) []byte {
	if utf16.IsSurrogate(r) {
		return append(b, byte(0xe0|r>>12), byte(0x80|r>>6&0x3f), byte(0x80|r&0x3f))
	}
	return utf8.AppendRune(b, r)
}

// wtf8Surrogate returns the surrogate that s holds WTF-8 encoded at i, or
// 0.
func wtf8Surrogate(s string, i int) rune {
	if i+2 < len(s) && s[i] == 0xed && s[i+1] >= 0xa0 && s[i+1] <= 0xbf && s[i+2]&0xc0 == 0x80 {
		return 0xd000 | rune(s[i+1]&0x3f)<<6 | rune(s[i+2]&0x3f)
	}
	return 0
}

// utf16Len is the length of b in UTF-16 units, as Java counts a string.
func utf16Len(b []byte) int {
	n := 0
	for i := 0; i < len(b); {
		_, size := utf8.DecodeRune(b[i:])
		if size == 4 {
			n++
		}
		n++
		if size < 1 {
			size = 1
		}
		if size == 1 && b[i] == 0xed && i+2 < len(b) { // a WTF-8 surrogate
			size = 3
		}
		i += size
	}
	return n
}

func (p *jparser) hex4() (rune, bool) {
	if p.pos+4 > len(p.s) {
		return 0, false
	}
	n, err := strconv.ParseUint(p.s[p.pos:p.pos+4], 16, 32)
	if err != nil {
		return 0, false
	}
	p.pos += 4
	return rune(n), true
}

// Shared schemas of JsonSchemaData (Schema.OPTIONAL_*_SCHEMA).
var (
	optString  = &schema{typ: kString, optional: true}
	optBool    = &schema{typ: kBool, optional: true}
	optInt32   = &schema{typ: kInt32, optional: true}
	optInt64   = &schema{typ: kInt64, optional: true}
	optFloat64 = &schema{typ: kFloat64, optional: true}
	optBytes   = &schema{typ: kBytes, optional: true}
)

// The shared schemas are serialized once here, so that Routers in several
// goroutines only ever read their memo.
func init() {
	for _, s := range []*schema{optString, optBool, optInt32, optInt64, optFloat64, optBytes} {
		appendSchemaJSON(nil, s)
	}
}

// errExpand means Debezium's schema inference threw; the payload stays the
// string it was.
var errExpand = errors.New("JSON expansion failed")

// inferrer is JsonSchemaData.toConnectSchema.
type inferrer struct{ nullAsBytes bool }

func (in inferrer) schemaOf(key string, n *jnode) (*schema, error) {
	switch n.typ {
	case jString:
		return optString, nil
	case jBool:
		return optBool, nil
	case jInt:
		return optInt32, nil
	case jLong:
		return optInt64, nil
	case jBigInt, jDouble:
		return optFloat64, nil
	case jArray:
		if len(n.elems) == 0 {
			return nil, nil
		}
		items, err := in.arrayItems(key, n)
		if err != nil {
			return nil, err
		}
		return &schema{typ: kArray, optional: true, items: items}, nil
	case jObject:
		s := &schema{typ: kStruct, optional: true, name: key}
		for i, k := range n.keys {
			fieldKey := k
			if !isBlank(key) {
				fieldKey = key + "." + k
			}
			fs, err := in.schemaOf(fieldKey, n.vals[i])
			if err != nil {
				return nil, err
			}
			if fs != nil { // n.keys holds each key once
				s.fields = append(s.fields, field{name: k, schema: fs})
			}
		}
		return s, nil
	case jNull:
		if in.nullAsBytes {
			return optBytes, nil
		}
	}
	return nil, nil
}

func isBlank(s string) bool {
	for _, c := range s {
		if c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\f' && c != '\v' {
			return false
		}
	}
	return true
}

// arrayItems is toConnectSchemaWithCycles with getFirstArrayElement.
func (in inferrer) arrayItems(key string, n *jnode) (*schema, error) {
	var ref *jnode
	var refSchema *schema
	for _, e := range n.elems {
		if e.typ == jNull {
			continue
		}
		if ref == nil {
			ref = e
		}
		if nodeType(e) != nodeType(ref) {
			return nil, errExpand // "Field is not a homogenous array"
		}
		if nodeType(ref) == jDouble { // NUMBER: the inferred schemas must agree
			if refSchema == nil {
				refSchema, _ = in.schemaOf("", ref)
			}
			if es, _ := in.schemaOf("", e); es != refSchema {
				return nil, errExpand
			}
		}
	}
	if ref != nil && ref.typ == jObject {
		// Debezium merges the distinct element schemas in HashSet order,
		// which depends on identity hash codes and so differs between JVM
		// runs; walbox merges in first-occurrence order.
		var distinct []*schema
		for _, e := range n.elems {
			if e.typ != jObject {
				continue
			}
			s, err := in.schemaOf(key, e)
			if err != nil {
				return nil, err
			}
			seen := false
			for _, d := range distinct {
				if d.equal(s) {
					seen = true
					break
				}
			}
			if !seen {
				distinct = append(distinct, s)
			}
		}
		var merged *schema
		for _, s := range distinct {
			merged = mergeSchema(merged, s)
		}
		return merged, nil
	}
	sample := ref
	if sample == nil {
		sample = &jnode{typ: jNull}
	}
	s, err := in.schemaOf("", sample)
	if err != nil {
		return nil, err
	}
	if s == nil {
		return nil, errExpand // "Array has unrecognized member schema"
	}
	return s, nil
}

// nodeType folds the number node types into one, as JsonNodeType.NUMBER.
func nodeType(n *jnode) jtype {
	switch n.typ {
	case jInt, jLong, jBigInt, jDouble:
		return jDouble
	}
	return n.typ
}

// mergeSchema is JsonSchemaData.mergeSchema: left's fields, then right's
// new ones; a bytes field (a null seen first) gives way to a typed one. The
// result copies name and version but not optionality, so it is required.
func mergeSchema(left, right *schema) *schema {
	if left == nil {
		return right
	}
	fields := append([]field(nil), left.fields...)
	at := make(map[string]int, len(fields)+len(right.fields))
	for i, f := range fields {
		at[f.name] = i
	}
	for _, f := range right.fields {
		i, ok := at[f.name]
		switch {
		case !ok:
			at[f.name] = len(fields)
			fields = append(fields, f)
		case !fields[i].schema.equal(f.schema) && fields[i].schema.typ == kBytes && f.schema.typ != kBytes:
			fields[i] = f
		}
	}
	return &schema{typ: left.typ, name: left.name, version: left.version, fields: fields}
}

// valueOf is JsonSchemaData.toConnectData plus the validation Struct.put
// performs; an error means Debezium's expansion threw after inferring the
// schema.
func valueOf(n *jnode, s *schema) (any, error) {
	if s == nil || s.typ != kStruct {
		return nil, errExpand // new Struct(non-struct schema)
	}
	return structOf(n, s)
}

func structOf(n *jnode, s *schema) (*structVal, error) {
	st := &structVal{schema: s, values: make([]any, len(s.fields))}
	for i, f := range s.fields {
		idx := n.member(f.name)
		if idx < 0 {
			continue
		}
		v, err := fieldValue(n.vals[idx], f.schema)
		if err != nil {
			return nil, err
		}
		if err := validate(f.schema, v); err != nil {
			return nil, err
		}
		st.values[i] = v
	}
	return st, nil
}

// fieldValue is getStructFieldValue.
func fieldValue(n *jnode, s *schema) (any, error) {
	switch n.typ {
	case jString:
		return n.s, nil
	case jBool:
		return n.b, nil
	case jDouble:
		return n.f, nil
	case jInt:
		return int32(n.i), nil
	case jLong:
		return n.i, nil
	case jBigInt:
		return nil, errExpand // a BigDecimal, which no schema here accepts
	case jArray:
		if s == nil || s.typ != kArray {
			return nil, errExpand
		}
		l := make([]any, len(n.elems))
		for i, e := range n.elems {
			v, err := fieldValue(e, s.items)
			if err != nil {
				return nil, err
			}
			l[i] = v
		}
		return l, nil
	case jObject:
		if s == nil || s.typ != kStruct {
			return nil, errExpand
		}
		return structOf(n, s)
	}
	return nil, nil
}

// validate is ConnectSchema.validateValue for the values fieldValue makes.
func validate(s *schema, v any) error {
	if v == nil {
		if s.optional {
			return nil
		}
		return errExpand
	}
	ok := false
	switch s.typ {
	case kString:
		_, ok = v.(string)
	case kBool:
		_, ok = v.(bool)
	case kInt32:
		_, ok = v.(int32)
	case kInt64:
		_, ok = v.(int64)
	case kFloat64:
		_, ok = v.(float64)
	case kBytes:
		_, ok = v.([]byte)
	case kArray:
		var l []any
		if l, ok = v.([]any); ok {
			for _, e := range l {
				if err := validate(s.items, e); err != nil {
					return err
				}
			}
		}
	case kStruct:
		var st *structVal
		st, ok = v.(*structVal)
		ok = ok && st.schema.equal(s)
	}
	if !ok {
		return errExpand
	}
	return nil
}

// expandJSON applies table.expand.json.payload to a string payload. It
// returns the payload's schema and value and whether the expansion failed
// half way: Debezium assigns the inferred schema before it converts the
// value, so when the conversion throws the record carries the original
// string under the inferred schema.
func expandJSON(payloadField, payload string, s *schema, nullAsBytes bool) (*schema, any, bool) {
	if len(payload) == 0 || (payload[0] != '{' && payload[0] != '[') {
		return s, payload, false
	}
	doc, err := parseJackson(payload)
	if err != nil {
		return s, payload, false
	}
	inferred, err := inferrer{nullAsBytes: nullAsBytes}.schemaOf(payloadField, doc)
	if err != nil {
		return s, payload, false
	}
	v, err := valueOf(doc, inferred)
	if err != nil {
		return inferred, payload, true
	}
	return inferred, v, false
}
