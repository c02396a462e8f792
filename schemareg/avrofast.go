package schemareg

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"sync"
	"unicode/utf8"
	"unsafe"

	"github.com/hamba/avro/v2"
)

// The Avro codec's fast path. The checking path (avro.go) decodes the JSON
// payload into map[string]any and []any, checks it against the schema into
// another such tree and hands that to hamba/avro, which looks up an encoder
// for every interface value it meets; that is most of an Avro record's cost.
// The fast path reads the payload once against the schema into a value of a
// Go type made for the schema (a struct per record, typed slices and maps, a
// pointer for a union of null and one type), which hamba/avro encodes with
// encoders it compiles once per type. Every leaf is the Go value the
// checking path gives (int32 for int, int64 for long, string, []byte,
// [N]byte, *big.Rat, ...), so hamba/avro picks the same leaf encoders and the
// bytes are the same (TestAvroFastMatchesChecking, FuzzAvroFast).
//
// The fast path only ever succeeds or gives up: on anything it does not
// accept (a value that does not fit, a repeated or escaped record key, an
// encoder error) the payload goes through the checking path, which encodes
// it or says what is wrong, so errors, their paths and every check are the
// checking path's. A union with more than one non-null branch is decided by
// the checking path's avroUnion for that value. A recursive schema, or a
// record of more than 64 fields, has no fast path.

// planKind is what a schema's value is in the fast path.
type planKind uint8

const (
	kNull planKind = iota
	kBool
	kInt
	kLong
	kFloat
	kDouble
	kString
	kBytes
	kDecimal // bytes or fixed with the decimal logical type: *big.Rat
	kEnum
	kFixed
	kRecord
	kArray
	kMap
	kNullable // a union of null and one other type: a pointer, nil for null
	kUnion    // any other union: map[string]any, as the checking path builds it
)

// avroPlan is how the values of one schema are read and held.
type avroPlan struct {
	kind planKind
	typ  reflect.Type
	// elem is an array's items, a map's values, a nullable union's
	// non-null branch.
	elem *avroPlan
	// A record's fields in schema order (struct field i is fields[i]),
	// their index by name, the bit set of those without a default, and
	// the record with every default filled in (invalid when none has one).
	fields   []*avroPlan
	names    map[string]int
	required uint64
	template reflect.Value
	// An enum's symbols.
	symbols map[string]struct{}
	// A fixed's size.
	size int
	// A decimal's logical schema.
	logical avro.LogicalSchema
	// A union's schema, and the defaults avroUnion fills in (kUnion).
	union    *avro.UnionSchema
	defaults map[*avro.Field]any
}

// errNoPlan says a schema has no fast path; the codec then always checks.
var errNoPlan = errors.New("no fast path for this schema")

// avroFast is the fast path of one schema.
type avroFast struct {
	schema avro.Schema
	root   *avroPlan
	// writers are hamba/avro writers kept for reuse.
	writers sync.Pool
}

// maxPooledWriter is the largest writer buffer kept for reuse, so that one
// large record does not keep its buffer.
const maxPooledWriter = 64 << 10

// newAvroFast builds s's fast path, or returns errNoPlan.
func newAvroFast(s avro.Schema, defaults map[*avro.Field]any) (*avroFast, error) {
	b := &planBuilder{done: map[avro.Schema]*avroPlan{}, building: map[avro.Schema]bool{}, defaults: defaults}
	root, err := b.plan(s)
	if err != nil {
		return nil, err
	}
	f := &avroFast{schema: s, root: root}
	f.writers.New = func() any { return avro.NewWriter(nil, 512) }
	return f, nil
}

// planBuilder builds plans, each named schema once.
type planBuilder struct {
	done     map[avro.Schema]*avroPlan
	building map[avro.Schema]bool
	defaults map[*avro.Field]any
}

var (
	typeNull   = reflect.TypeFor[struct{}]()
	typeRat    = reflect.TypeFor[*big.Rat]()
	typeAnyMap = reflect.TypeFor[map[string]any]()
)

func (b *planBuilder) plan(s avro.Schema) (*avroPlan, error) {
	if ref, ok := s.(*avro.RefSchema); ok {
		s = ref.Schema()
	}
	if p, ok := b.done[s]; ok {
		return p, nil
	}
	if b.building[s] {
		// A record that holds itself: no Go type holds it by value.
		return nil, errNoPlan
	}
	switch s := s.(type) {
	case *avro.PrimitiveSchema:
		if s.Logical() != nil && s.Logical().Type() == avro.Decimal {
			return &avroPlan{kind: kDecimal, typ: typeRat, logical: s.Logical()}, nil
		}
		switch s.Type() {
		case avro.Null:
			return &avroPlan{kind: kNull, typ: typeNull}, nil
		case avro.Boolean:
			return &avroPlan{kind: kBool, typ: reflect.TypeFor[bool]()}, nil
		case avro.Int:
			return &avroPlan{kind: kInt, typ: reflect.TypeFor[int32]()}, nil
		case avro.Long:
			return &avroPlan{kind: kLong, typ: reflect.TypeFor[int64]()}, nil
		case avro.Float:
			return &avroPlan{kind: kFloat, typ: reflect.TypeFor[float32]()}, nil
		case avro.Double:
			return &avroPlan{kind: kDouble, typ: reflect.TypeFor[float64]()}, nil
		case avro.String:
			return &avroPlan{kind: kString, typ: reflect.TypeFor[string]()}, nil
		case avro.Bytes:
			return &avroPlan{kind: kBytes, typ: reflect.TypeFor[[]byte]()}, nil
		}
	case *avro.EnumSchema:
		p := &avroPlan{kind: kEnum, typ: reflect.TypeFor[string](), symbols: map[string]struct{}{}}
		for _, sym := range s.Symbols() {
			p.symbols[sym] = struct{}{}
		}
		b.done[s] = p
		return p, nil
	case *avro.FixedSchema:
		if s.Logical() != nil && s.Logical().Type() == avro.Decimal {
			p := &avroPlan{kind: kDecimal, typ: typeRat, logical: s.Logical()}
			b.done[s] = p
			return p, nil
		}
		p := &avroPlan{kind: kFixed, typ: reflect.ArrayOf(s.Size(), reflect.TypeFor[byte]()), size: s.Size()}
		b.done[s] = p
		return p, nil
	case *avro.ArraySchema:
		e, err := b.plan(s.Items())
		if err != nil {
			return nil, err
		}
		return &avroPlan{kind: kArray, typ: reflect.SliceOf(e.typ), elem: e}, nil
	case *avro.MapSchema:
		e, err := b.plan(s.Values())
		if err != nil {
			return nil, err
		}
		return &avroPlan{kind: kMap, typ: reflect.MapOf(reflect.TypeFor[string](), e.typ), elem: e}, nil
	case *avro.UnionSchema:
		if s.Nullable() {
			_, typ := s.Indices()
			e, err := b.plan(s.Types()[typ])
			if err != nil {
				return nil, err
			}
			return &avroPlan{kind: kNullable, typ: reflect.PointerTo(e.typ), elem: e, union: s}, nil
		}
		// The branches are planned for nothing but to find recursion,
		// which the checking path's avroUnion would meet.
		for _, t := range s.Types() {
			if t.Type() == avro.Null {
				continue
			}
			if _, err := b.plan(t); err != nil {
				return nil, err
			}
		}
		return &avroPlan{kind: kUnion, typ: typeAnyMap, union: s, defaults: b.defaults}, nil
	case *avro.RecordSchema:
		return b.record(s)
	}
	return nil, errNoPlan
}

func (b *planBuilder) record(s *avro.RecordSchema) (*avroPlan, error) {
	if len(s.Fields()) > 64 {
		return nil, errNoPlan
	}
	b.building[s] = true
	defer delete(b.building, s)
	p := &avroPlan{kind: kRecord, names: map[string]int{}}
	sf := make([]reflect.StructField, len(s.Fields()))
	for i, f := range s.Fields() {
		fp, err := b.plan(f.Type())
		if err != nil {
			return nil, err
		}
		p.fields = append(p.fields, fp)
		p.names[f.Name()] = i
		if !f.HasDefault() {
			p.required |= 1 << i
		}
		sf[i] = reflect.StructField{Name: "F" + strconv.Itoa(i), Type: fp.typ, Tag: reflect.StructTag(`avro:"` + f.Name() + `"`)}
	}
	p.typ = reflect.StructOf(sf)
	for i, f := range s.Fields() {
		if !f.HasDefault() {
			continue
		}
		dv, ok := b.defaults[f]
		if !ok {
			var problem string
			if dv, _, problem = avroDefault(f); problem != "" {
				return nil, errNoPlan
			}
		}
		v, ok := p.fields[i].convert(dv)
		if !ok {
			return nil, errNoPlan
		}
		if !p.template.IsValid() {
			p.template = reflect.New(p.typ).Elem()
		}
		p.template.Field(i).Set(v)
	}
	b.done[s] = p
	return p, nil
}

// convert turns a value as the checking path builds it (a default) into
// p's Go type.
func (p *avroPlan) convert(v any) (reflect.Value, bool) {
	switch p.kind {
	case kNull:
		return reflect.Zero(p.typ), v == nil
	case kRecord:
		m, ok := v.(map[string]any)
		if !ok {
			return reflect.Value{}, false
		}
		out := reflect.New(p.typ).Elem()
		for name, i := range p.names {
			fv, ok := m[name]
			if !ok {
				return reflect.Value{}, false
			}
			c, ok := p.fields[i].convert(fv)
			if !ok {
				return reflect.Value{}, false
			}
			out.Field(i).Set(c)
		}
		return out, len(m) == len(p.names)
	case kArray:
		a, ok := v.([]any)
		if !ok {
			return reflect.Value{}, false
		}
		out := reflect.MakeSlice(p.typ, len(a), len(a))
		for i, e := range a {
			c, ok := p.elem.convert(e)
			if !ok {
				return reflect.Value{}, false
			}
			out.Index(i).Set(c)
		}
		return out, true
	case kMap:
		m, ok := v.(map[string]any)
		if !ok {
			return reflect.Value{}, false
		}
		out := reflect.MakeMapWithSize(p.typ, len(m))
		for k, e := range m {
			c, ok := p.elem.convert(e)
			if !ok {
				return reflect.Value{}, false
			}
			out.SetMapIndex(reflect.ValueOf(k), c)
		}
		return out, true
	case kNullable:
		if v == nil {
			return reflect.Zero(p.typ), true
		}
		m, ok := v.(map[string]any)
		if !ok || len(m) != 1 {
			return reflect.Value{}, false
		}
		for name, inner := range m {
			b, pos := p.union.Types().Get(name)
			if pos < 0 {
				return reflect.Value{}, false
			}
			if b.Type() == avro.Null {
				return reflect.Zero(p.typ), inner == nil
			}
			c, ok := p.elem.convert(inner)
			if !ok {
				return reflect.Value{}, false
			}
			ptr := reflect.New(p.elem.typ)
			ptr.Elem().Set(c)
			return ptr, true
		}
	case kUnion:
		if v == nil {
			return reflect.Zero(p.typ), true
		}
		m, ok := v.(map[string]any)
		return reflect.ValueOf(m), ok
	default:
		rv := reflect.ValueOf(v)
		return rv, rv.IsValid() && rv.Type() == p.typ
	}
	return reflect.Value{}, false
}

// encode appends doc's Avro body to dst, or returns false when the
// checking path is to decide.
func (f *avroFast) encode(dst, doc []byte) ([]byte, bool) {
	s := avroScan{b: doc}
	v := reflect.New(f.root.typ)
	if !f.root.read(&s, v.Elem()) {
		return dst, false
	}
	if s.ws(); s.i != len(s.b) {
		return dst, false
	}
	w := f.writers.Get().(*avro.Writer)
	w.Reset(nil)
	w.Error = nil
	if f.root.kind == kRecord {
		w.WriteVal(f.schema, v.Interface())
	} else {
		w.WriteVal(f.schema, v.Elem().Interface())
	}
	ok := w.Error == nil
	if ok {
		dst = append(dst, w.Buffer()...)
	}
	if cap(w.Buffer()) <= maxPooledWriter {
		w.Reset(nil)
		w.Error = nil
		f.writers.Put(w)
	}
	return dst, ok
}

// avroScan reads a JSON document, checking its syntax as it goes (what it
// accepts, json.Valid accepts): every read gives up at the first byte that
// is not what JSON allows there.
type avroScan struct {
	b []byte
	i int
}

// peek is the byte at s.i, 0 at the end (a NUL is no JSON either).
func (s *avroScan) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

func (s *avroScan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// lit reads the literal word (true, false, null).
func (s *avroScan) lit(word string) bool {
	if len(s.b)-s.i < len(word) || string(s.b[s.i:s.i+len(word)]) != word {
		return false
	}
	s.i += len(word)
	return true
}

// expect reads the byte c, after white space.
func (s *avroScan) expect(c byte) bool {
	s.ws()
	if s.peek() != c {
		return false
	}
	s.i++
	return true
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

// rawString reads the string at s.i (its opening quote) and returns its
// bytes between the quotes, and whether it is plain: no escape, every byte
// ASCII, so that the bytes are the string's value. false when it is not a
// JSON string.
func (s *avroScan) rawString() (raw []byte, plain, ok bool) {
	if s.peek() != '"' {
		return nil, false, false
	}
	s.i++
	start := s.i
	plain = true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, plain, true
		case c == '\\':
			plain = false
			s.i++
			switch s.peek() {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				s.i++
			case 'u':
				if len(s.b)-s.i < 5 || !isHex(s.b[s.i+1]) || !isHex(s.b[s.i+2]) || !isHex(s.b[s.i+3]) || !isHex(s.b[s.i+4]) {
					return nil, false, false
				}
				s.i += 5
			default:
				return nil, false, false
			}
		case c < 0x20:
			return nil, false, false
		case c >= utf8.RuneSelf:
			plain = false
			s.i++
		default:
			s.i++
		}
	}
	return nil, false, false
}

// str reads the string at s.i as encoding/json decodes it. A plain string
// (valid UTF-8 without escapes, as most are) shares doc's bytes: the value
// is encoded and dropped before Encode returns, and doc is not changed
// meanwhile.
func (s *avroScan) str() (string, bool) {
	start := s.i
	raw, plain, ok := s.rawString()
	if !ok {
		return "", false
	}
	if plain || (utf8.Valid(raw) && bytes.IndexByte(raw, '\\') < 0) {
		if len(raw) == 0 {
			return "", true
		}
		return unsafe.String(&raw[0], len(raw)), true
	}
	var v string
	if err := json.Unmarshal(s.b[start:s.i], &v); err != nil {
		return "", false
	}
	return v, true
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads the JSON number at s.i and returns its text, or false when
// there is none.
func (s *avroScan) number() (string, bool) {
	start := s.i
	if s.peek() == '-' {
		s.i++
	}
	switch c := s.peek(); {
	case c == '0':
		s.i++
	case c >= '1' && c <= '9':
		for s.i++; isDigit(s.peek()); s.i++ {
		}
	default:
		return "", false
	}
	if s.peek() == '.' {
		s.i++
		if !isDigit(s.peek()) {
			return "", false
		}
		for isDigit(s.peek()) {
			s.i++
		}
	}
	if c := s.peek(); c == 'e' || c == 'E' {
		s.i++
		if c := s.peek(); c == '+' || c == '-' {
			s.i++
		}
		if !isDigit(s.peek()) {
			return "", false
		}
		for isDigit(s.peek()) {
			s.i++
		}
	}
	return unsafe.String(&s.b[start], s.i-start), true
}

// skip moves past the value at s.i, checking its strings, literals and
// numbers and that its brackets pair up in count (json.Valid checks the
// rest of what was skipped).
func (s *avroScan) skip() bool {
	depth := 0
	for {
		s.ws()
		switch s.peek() {
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			depth--
			s.i++
		case ',', ':':
			if depth == 0 {
				return false
			}
			s.i++
			continue
		case '"':
			if _, _, ok := s.rawString(); !ok {
				return false
			}
		case 't':
			if !s.lit("true") {
				return false
			}
		case 'f':
			if !s.lit("false") {
				return false
			}
		case 'n':
			if !s.lit("null") {
				return false
			}
		default:
			if _, ok := s.number(); !ok {
				return false
			}
		}
		if depth <= 0 {
			return depth == 0
		}
	}
}

// read reads the value at s.i into dst (settable, of p.typ), setting all of
// it; false when the checking path is to decide.
func (p *avroPlan) read(s *avroScan, dst reflect.Value) bool {
	s.ws()
	c := s.peek()
	switch p.kind {
	case kNull:
		return s.lit("null")
	case kBool:
		switch {
		case c == 't' && s.lit("true"):
			dst.SetBool(true)
			return true
		case c == 'f' && s.lit("false"):
			dst.SetBool(false)
			return true
		}
		return false
	case kInt, kLong:
		text, ok := s.number()
		if !ok {
			return false
		}
		bits := 64
		if p.kind == kInt {
			bits = 32
		}
		n, err := strconv.ParseInt(text, 10, bits)
		if err != nil {
			return false
		}
		dst.SetInt(n)
		return true
	case kFloat, kDouble:
		text, ok := s.number()
		if !ok {
			return false
		}
		n, err := strconv.ParseFloat(text, 64)
		if err != nil || p.kind == kFloat && math.Abs(n) > math.MaxFloat32 {
			return false
		}
		dst.SetFloat(n)
		return true
	case kString, kEnum:
		str, ok := s.str()
		if !ok {
			return false
		}
		if p.kind == kEnum {
			if _, ok := p.symbols[str]; !ok {
				return false
			}
		}
		dst.SetString(str)
		return true
	case kBytes, kFixed:
		str, ok := s.str()
		if !ok {
			return false
		}
		b, err := base64.StdEncoding.DecodeString(str)
		if err != nil {
			return false
		}
		if p.kind == kBytes {
			dst.SetBytes(b)
			return true
		}
		if len(b) != p.size {
			return false
		}
		reflect.Copy(dst, reflect.ValueOf(b))
		return true
	case kDecimal:
		var v any
		if c == '"' {
			str, ok := s.str()
			if !ok {
				return false
			}
			v = str
		} else {
			text, ok := s.number()
			if !ok {
				return false
			}
			v = json.Number(text)
		}
		r, _, problem := avroDecimal(p.logical, v, "")
		if problem != "" {
			return false
		}
		dst.Set(reflect.ValueOf(r))
		return true
	case kRecord:
		return p.readRecord(s, dst)
	case kArray:
		if c != '[' {
			return false
		}
		s.i++
		dst.SetZero()
		if s.ws(); s.peek() == ']' {
			s.i++
			return true
		}
		for {
			n := dst.Len()
			if n == dst.Cap() {
				dst.Grow(1)
			}
			dst.SetLen(n + 1)
			if !p.elem.read(s, dst.Index(n)) {
				return false
			}
			s.ws()
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				return true
			default:
				return false
			}
		}
	case kMap:
		if c != '{' {
			return false
		}
		s.i++
		m := reflect.MakeMap(p.typ)
		if s.ws(); s.peek() == '}' {
			s.i++
			dst.Set(m)
			return true
		}
		val := reflect.New(p.elem.typ).Elem()
		for {
			s.ws()
			key, ok := s.str()
			if !ok || !s.expect(':') || !p.elem.read(s, val) {
				return false
			}
			m.SetMapIndex(reflect.ValueOf(key), val)
			s.ws()
			switch s.peek() {
			case ',':
				s.i++
			case '}':
				s.i++
				dst.Set(m)
				return true
			default:
				return false
			}
		}
	case kNullable:
		return p.readNullable(s, dst)
	case kUnion:
		// The checking path's union rules, on this value alone.
		start := s.i
		if !s.skip() || !json.Valid(s.b[start:s.i]) {
			return false
		}
		dec := json.NewDecoder(bytes.NewReader(s.b[start:s.i]))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			return false
		}
		nv, _, problem := avroUnion(p.union, v, "$", p.defaults)
		if problem != "" {
			return false
		}
		if nv == nil {
			dst.SetZero()
			return true
		}
		m, ok := nv.(map[string]any)
		if !ok {
			return false
		}
		dst.Set(reflect.ValueOf(m))
		return true
	}
	return false
}

// readRecord reads a record: every field present or given its default, no
// other member, no member twice.
func (p *avroPlan) readRecord(s *avroScan, dst reflect.Value) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	if p.template.IsValid() {
		dst.Set(p.template)
	} else {
		dst.SetZero()
	}
	if s.ws(); s.peek() == '}' {
		s.i++
		return p.required == 0
	}
	var seen uint64
	for {
		s.ws()
		key, plain, ok := s.rawString()
		if !ok || !plain {
			return false
		}
		i, ok := p.names[string(key)]
		if !ok || seen&(1<<i) != 0 {
			return false
		}
		seen |= 1 << i
		if !s.expect(':') || !p.fields[i].read(s, dst.Field(i)) {
			return false
		}
		s.ws()
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			return seen&p.required == p.required
		default:
			return false
		}
	}
}

// readNullable reads a union of null and one type as avroUnion does: null;
// the wrapped form {"branch name": value} when the value is an object of
// one member naming a branch; else the value of the non-null branch.
func (p *avroPlan) readNullable(s *avroScan, dst reflect.Value) bool {
	switch s.peek() {
	case 'n':
		if !s.lit("null") {
			return false
		}
		dst.SetZero()
		return true
	case '{':
		start := s.i
		s.i++
		if s.ws(); s.peek() == '"' {
			key, plain, ok := s.rawString()
			if !ok || !plain {
				return false
			}
			if b, pos := p.union.Types().Get(string(key)); pos >= 0 {
				if b.Type() == avro.Null {
					// The checking path refuses {"null": ...}.
					return false
				}
				// The wrapped form if this is the only member; with
				// more members it still is if they all repeat the name
				// (encoding/json keeps one): left to the checking path.
				if !s.expect(':') || !p.readInto(s, dst) {
					return false
				}
				return s.expect('}')
			}
		}
		// Not the wrapped form, whatever follows.
		s.i = start
	}
	return p.readInto(s, dst)
}

// readInto reads the nullable union's non-null branch into a new value
// dst points to.
func (p *avroPlan) readInto(s *avroScan, dst reflect.Value) bool {
	ptr := reflect.New(p.elem.typ)
	if !p.elem.read(s, ptr.Elem()) {
		return false
	}
	dst.Set(ptr)
	return true
}
