package schemareg

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/hamba/avro/v2"
)

// The inferred mode: the schema of each payload is derived from the payload
// itself, as Debezium's outbox EventRouter does with
// table.expand.json.payload=true (its JsonSchemaData builds a Kafka Connect
// schema from the JSON), and turned into Avro as Apicurio's AvroConverter
// (its AvroData) turns that Connect schema into Avro. What follows restates
// their rules; it was written from reading Debezium 3.6.1's JsonSchemaData
// and EventRouterDelegate and Apicurio Registry 2.6.13's AvroData, and is
// checked against them by the e2e comparison.
//
// Connect schema (JsonSchemaData.toConnectSchema, key the payload column's
// name for the payload itself):
//   - every schema is optional, except the struct an array's object
//     elements of two or more shapes merge into (Connect's
//     SchemaUtil.copySchemaBasics does not copy optional);
//   - a string is a string, a boolean a boolean;
//   - an integer that fits 32 bits is an int32, one that fits 64 bits an
//     int64; a number with a fraction or an exponent is a float64 (an
//     integer beyond 64 bits makes Debezium's expansion fail);
//   - null, and an empty array, give no schema: the field is dropped;
//   - an object is a struct named after its path from the payload column
//     ("payload", "payload.customer"), its fields in document order;
//   - an array's elements must be of one JSON type (null elements are
//     skipped), numbers of one number type, or Debezium fails with "Field is
//     not a homogenous array"; an array of objects has one struct, named
//     after the array's path, holding the fields of every element's struct
//     (the first element's type winning for a field; Debezium merges the
//     shapes in a HashSet's order, walbox in the order met); an array of anything
//     else takes the first non-null element's schema, with no name.
//
// Avro (AvroData.fromConnectSchema, connect.meta.data on):
//   - an optional schema is the union ["null", T], a record field of one
//     has "default": null; but the payload's own schema is its record, not
//     a union (the serializer registers the datum's schema);
//   - int32 is int, int64 long, float64 double;
//   - a struct is a record whose name is split at its last dot into
//     namespace and name, with the property "connect.name" holding the
//     struct's name; a struct without a name is
//     io.confluent.connect.avro.ConnectDefault (ConnectDefault2, ... for the
//     next ones), without connect.name;
//   - a struct already written (by name, or an equal one) is referred to by
//     name;
//   - the schema text is Avro's (Java) Schema.toString: compact JSON, keys
//     in the order type, name, namespace (only where it differs from the
//     enclosing one), fields, properties.

// ctype is a Connect schema type.
type ctype uint8

const (
	cString ctype = iota
	cBool
	cInt32
	cInt64
	cFloat64
	cArray
	cStruct
	// cBigInteger is an integer beyond 64 bits, a number type of its own
	// (Jackson's BigIntegerNode) for the homogeneity check.
	cBigInteger
)

func (t ctype) String() string {
	return [...]string{"STRING", "BOOLEAN", "INT32", "INT64", "FLOAT64", "ARRAY", "STRUCT", "FLOAT64"}[t]
}

// avroName is the Avro type a primitive Connect type converts to, also the
// union branch's name.
func (t ctype) avroName() string {
	return [...]string{"string", "boolean", "int", "long", "double", "array", "record", "double"}[t]
}

// cschema is a Connect schema, optional unless required is set.
type cschema struct {
	typ ctype
	// required marks the struct of an array's object elements merged
	// from several shapes: Connect's SchemaUtil.copySchemaBasics, which
	// JsonSchemaData's merge builds it with, does not copy optional.
	required bool
	// name is a struct's name, when named is set.
	name   string
	named  bool
	fields []cfield // a struct's
	elem   *cschema // an array's
}

type cfield struct {
	name   string
	schema *cschema
}

func (s *cschema) field(name string) *cschema {
	for i := range s.fields {
		if s.fields[i].name == name {
			return s.fields[i].schema
		}
	}
	return nil
}

// key renders s fully, for equality (Connect's ConnectSchema.equals).
func (s *cschema) key(b *strings.Builder) {
	switch s.typ {
	case cArray:
		b.WriteString("[")
		s.elem.key(b)
		b.WriteString("]")
	case cStruct:
		if s.named {
			b.WriteString(strconv.Quote(s.name))
		}
		if s.required {
			b.WriteString("!")
		}
		b.WriteString("{")
		for i, f := range s.fields {
			if i > 0 {
				b.WriteString(",")
			}
			b.WriteString(strconv.Quote(f.name))
			b.WriteString(":")
			f.schema.key(b)
		}
		b.WriteString("}")
	default:
		b.WriteString(s.typ.String())
	}
}

func (s *cschema) keyString() string {
	var b strings.Builder
	s.key(&b)
	return b.String()
}

// inferError is a payload Debezium's expansion (or Apicurio's converter)
// fails on: the path and the problem.
type inferError struct{ path, problem string }

// inferSchema is JsonSchemaData.toConnectSchema: the schema of v, whose
// struct name (key) is name when named; nil when v gives no schema.
func inferSchema(name string, named bool, v *jvalue, path string) (*cschema, *inferError) {
	switch v.kind {
	case jString:
		return &cschema{typ: cString}, nil
	case jBool:
		return &cschema{typ: cBool}, nil
	case jNumber:
		t := numberType(v.text)
		if t == cBigInteger {
			return nil, &inferError{path, "the integer " + v.text + " does not fit 64 bits: Debezium infers a float64 for it and its expansion fails " +
				"putting the number into the record; write it as a string, or as a number with a fraction"}
		}
		return &cschema{typ: t}, nil
	case jArray:
		if len(v.elems) == 0 {
			return nil, nil
		}
		elem, ierr := inferElements(name, named, v, path)
		if ierr != nil {
			return nil, ierr
		}
		return &cschema{typ: cArray, elem: elem}, nil
	case jObject:
		s := &cschema{typ: cStruct, name: name, named: named}
		for _, m := range v.members {
			fieldKey := m.name
			if named && strings.TrimSpace(name) != "" {
				fieldKey = name + "." + m.name
			}
			fs, ierr := inferSchema(fieldKey, true, m.value, path+"."+m.name)
			if ierr != nil {
				return nil, ierr
			}
			if fs != nil && s.field(m.name) == nil {
				s.fields = append(s.fields, cfield{name: m.name, schema: fs})
			}
		}
		return s, nil
	}
	return nil, nil // null
}

// inferElements is JsonSchemaData.toConnectSchemaWithCycles: the schema of
// a non-empty array's elements.
func inferElements(name string, named bool, arr *jvalue, path string) (*cschema, *inferError) {
	sample, ierr := homogeneous(arr, path)
	if ierr != nil {
		return nil, ierr
	}
	if sample == nil || sample.kind != jObject {
		var s *cschema
		if sample != nil {
			var ierr *inferError
			if s, ierr = inferSchema("", false, sample, path+"[]"); ierr != nil {
				return nil, ierr
			}
		}
		if s == nil {
			return nil, &inferError{path, "the array's elements give no schema (all null, or empty arrays): Debezium's expansion fails " +
				"(\"Array has unrecognized member schema\"); drop the array or give it elements"}
		}
		return s, nil
	}
	// One struct for all the object elements: their distinct schemas
	// merged, in the order met.
	var (
		merged *cschema
		seen   = map[string]bool{}
	)
	for i, e := range arr.elems {
		if e.kind != jObject {
			continue
		}
		s, ierr := inferSchema(name, named, e, path+"["+strconv.Itoa(i)+"]")
		if ierr != nil {
			return nil, ierr
		}
		k := s.keyString()
		if seen[k] {
			continue
		}
		seen[k] = true
		if merged == nil {
			merged = s
			continue
		}
		if !merged.required {
			// Two shapes: the merge makes a new struct, not optional.
			c := *merged
			c.fields = slices.Clone(merged.fields)
			c.required = true
			merged = &c
		}
		for _, f := range s.fields {
			if merged.field(f.name) == nil {
				merged.fields = append(merged.fields, f)
			}
		}
	}
	return merged, nil
}

// homogeneous is JsonSchemaData.getFirstArrayElement: the first non-null
// element, once every non-null element is checked to be of its JSON type
// (and of its number type).
func homogeneous(arr *jvalue, path string) (*jvalue, *inferError) {
	var ref *jvalue
	for i, e := range arr.elems {
		if e.kind == jNull {
			continue
		}
		if ref == nil {
			ref = e
		}
		if e.kind != ref.kind {
			return nil, &inferError{path + "[" + strconv.Itoa(i) + "]", "Field is not a homogenous array (" + ref.describe() + " x " + e.kind.kindName() +
				"): Debezium infers one schema for an array's elements and fails on elements of two JSON types"}
		}
		if e.kind == jNumber {
			if a, b := numberType(ref.text), numberType(e.text); a != b {
				return nil, &inferError{path + "[" + strconv.Itoa(i) + "]", "Field is not a homogenous array (" + ref.text + " x " + e.text +
					"), different number types (" + a.String() + " x " + b.String() + "): Debezium fails on an array mixing integers that fit 32 bits, " +
					"integers that need 64 bits and numbers with a fraction; write them all with a fraction (1.0) or all as integers of one size"}
			}
		}
	}
	return ref, nil
}

// avroNamespace is where AvroData puts the records of unnamed structs.
const avroNamespace = "io.confluent.connect.avro"

// avroWriter renders a Connect schema as AvroData converts it and Avro's
// Schema.toString writes it.
type avroWriter struct {
	b strings.Builder
	// records are the records written, by full name, with their struct's
	// key; byKey the full name of each struct written, by key.
	records map[string]string
	byKey   map[string]string
	// unnamed counts the records of unnamed structs.
	unnamed int
}

// inferredAvro returns the Avro schema text of the payload's struct s (or
// the problem: a name Avro refuses, two structs named alike). The struct
// is optional, but the schema registered is the record itself, not the
// union ["null", record]: Apicurio's serializer takes the schema of the
// datum AvroData made, a record.
func inferredAvro(s *cschema) (string, *inferError) {
	w := &avroWriter{records: map[string]string{}, byKey: map[string]string{}}
	if ierr := w.record(s, "", "$"); ierr != nil {
		return "", ierr
	}
	return w.b.String(), nil
}

func (w *avroWriter) optional(s *cschema, ns, path string) *inferError {
	w.b.WriteString(`["null",`)
	if ierr := w.schema(s, ns, path); ierr != nil {
		return ierr
	}
	w.b.WriteString("]")
	return nil
}

func (w *avroWriter) schema(s *cschema, ns, path string) *inferError {
	switch s.typ {
	case cArray:
		w.b.WriteString(`{"type":"array","items":`)
		items := w.optional
		if s.elem.required {
			items = w.schema
		}
		if ierr := items(s.elem, ns, path+"[]"); ierr != nil {
			return ierr
		}
		w.b.WriteString("}")
		return nil
	case cStruct:
		return w.record(s, ns, path)
	}
	w.b.WriteString(`"` + s.typ.avroName() + `"`)
	return nil
}

func (w *avroWriter) record(s *cschema, ns, path string) *inferError {
	key := s.keyString()
	var space, name string
	if s.named {
		if i := strings.LastIndexByte(s.name, '.'); i >= 0 {
			space, name = s.name[:i], s.name[i+1:]
		} else {
			name = s.name
		}
	}
	full := s.name
	if !s.named {
		full = ""
	}
	// A struct met before, by name (AvroData's cycle references) or equal
	// to one met before (its schema map), is referred to by name.
	if s.named {
		if k, ok := w.records[full]; ok {
			if k != key {
				return &inferError{path, "two objects of the payload get the record name " + strconv.Quote(full) +
					" with different fields: Apicurio's converter would reuse the first record for the second"}
			}
			w.ref(full, space, name, ns)
			return nil
		}
	}
	if prev, ok := w.byKey[key]; ok {
		sp, nm := splitAvroName(prev)
		w.ref(prev, sp, nm, ns)
		return nil
	}
	if !s.named {
		w.unnamed++
		space, name = avroNamespace, "ConnectDefault"
		if w.unnamed > 1 {
			name += strconv.Itoa(w.unnamed)
		}
		full = space + "." + name
	}
	if p := invalidAvroName(name); p != "" {
		return &inferError{path, "record name " + strconv.Quote(name) + " (of " + strconv.Quote(full) + ") " + p}
	}
	if space != "" {
		for part := range strings.SplitSeq(space, ".") {
			if p := invalidAvroName(part); p != "" {
				return &inferError{path, "record namespace " + strconv.Quote(space) + " (of " + strconv.Quote(full) + "): " + strconv.Quote(part) + " " + p}
			}
		}
	}
	w.records[full] = key
	w.byKey[key] = full

	w.b.WriteString(`{"type":"record","name":"` + name + `"`)
	switch {
	case space != "" && space != ns:
		w.b.WriteString(`,"namespace":"` + space + `"`)
	case space == "" && ns != "":
		w.b.WriteString(`,"namespace":""`)
	}
	w.b.WriteString(`,"fields":[`)
	for i, f := range s.fields {
		if p := invalidAvroName(f.name); p != "" {
			return &inferError{path + "." + f.name, "field name " + strconv.Quote(f.name) + " " + p}
		}
		if i > 0 {
			w.b.WriteString(",")
		}
		w.b.WriteString(`{"name":"` + f.name + `","type":`)
		if ierr := w.optional(f.schema, space, path+"."+f.name); ierr != nil {
			return ierr
		}
		w.b.WriteString(`,"default":null}`)
	}
	w.b.WriteString("]")
	if s.named {
		w.b.WriteString(`,"connect.name":` + strconv.Quote(s.name))
	}
	w.b.WriteString("}")
	return nil
}

// ref writes a reference to the record full (space.name) from namespace ns:
// the short name within its namespace (unless it is the name of an Avro
// type), else the full name, as Avro's Name.getQualified does.
func (w *avroWriter) ref(full, space, name, ns string) {
	if space == "" || space == ns && !avroTypeNames[name] {
		w.b.WriteString(`"` + name + `"`)
		return
	}
	w.b.WriteString(`"` + full + `"`)
}

// avroTypeNames are Avro's Schema.Type names.
var avroTypeNames = map[string]bool{"record": true, "enum": true, "array": true, "map": true, "union": true, "fixed": true,
	"string": true, "bytes": true, "int": true, "long": true, "float": true, "double": true, "boolean": true, "null": true}

func splitAvroName(full string) (space, name string) {
	if i := strings.LastIndexByte(full, '.'); i >= 0 {
		return full[:i], full[i+1:]
	}
	return "", full
}

// invalidAvroName says why Avro refuses name, "" when it does not: a name
// starts with a letter or _ and holds letters, digits and _ only.
func invalidAvroName(name string) string {
	if name == "" {
		return "is empty, which Avro refuses as a name (Apicurio's converter fails); rename the JSON key"
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		letter := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_'
		if !letter && (i == 0 || c < '0' || c > '9') {
			return "is not a valid Avro name (a letter or _, then letters, digits or _; Apicurio's converter fails on it); rename the JSON key"
		}
	}
	return ""
}

// inferredValue is JsonSchemaData.toConnectData and the Avro datum AvroData
// makes of it, strictly: every value must be of its schema's type exactly,
// or Debezium's expansion fails (Connect's Struct validation); a member the
// schema lacks (an object element of an array whose fields another element
// decided) must be null or an empty array, which Debezium drops too. The
// result is the value hamba/avro encodes with as, the compiled Avro schema
// of s at that place: the union ["null", T] for an optional s, the record
// for a required one (and for the payload itself). Union branches are named
// as hamba/avro names them (unionName), which for a record without a
// namespace inside one with a namespace is not the name Java's Avro gives
// it; the encoding does not depend on names.
func inferredValue(s *cschema, as avro.Schema, v *jvalue, path string) (any, *inferError) {
	if ref, ok := as.(*avro.RefSchema); ok {
		as = ref.Schema()
	}
	if v.kind == jNull {
		if s.required {
			return nil, &inferError{path, "null where the array's elements are objects of several shapes: Debezium merges them into a record that is not optional, " +
				"and its expansion fails on the null (Connect's Struct validation); leave the null out or give the elements one shape"}
		}
		return nil, nil
	}
	branch := as
	if u, ok := as.(*avro.UnionSchema); ok {
		branch = u.Types()[1]
		if ref, ok := branch.(*avro.RefSchema); ok {
			branch = ref.Schema()
		}
	}
	wrap := func(native any) any {
		if branch == as {
			return native
		}
		return map[string]any{unionName(branch): native}
	}
	mismatch := func() (any, *inferError) {
		return nil, &inferError{path, "expected " + strings.ToLower(s.typ.String()) + " (the type the array's first element of this shape gave it), got " +
			v.describe() + ": Debezium's expansion fails on it (the value does not fit the inferred schema); give the array's elements one shape"}
	}
	switch s.typ {
	case cString:
		if v.kind != jString {
			return mismatch()
		}
		return wrap(v.text), nil
	case cBool:
		if v.kind != jBool {
			return mismatch()
		}
		return wrap(v.b), nil
	case cInt32, cInt64, cFloat64:
		if v.kind != jNumber || numberType(v.text) != s.typ {
			return mismatch()
		}
		switch s.typ {
		case cInt32:
			n, _ := strconv.ParseInt(v.text, 10, 32)
			return wrap(int32(n)), nil
		case cInt64:
			n, _ := strconv.ParseInt(v.text, 10, 64)
			return wrap(n), nil
		}
		// Out of range is ±Inf, as Java's Double.parseDouble gives it.
		f, err := strconv.ParseFloat(v.text, 64)
		if err != nil && !math.IsInf(f, 0) && f != 0 {
			return mismatch()
		}
		return wrap(f), nil
	case cArray:
		if v.kind != jArray {
			return mismatch()
		}
		arr, ok := branch.(*avro.ArraySchema)
		if !ok {
			return nil, &inferError{path, "the compiled schema has " + string(branch.Type()) + " where an array is"}
		}
		out := make([]any, len(v.elems))
		for i, e := range v.elems {
			nv, ierr := inferredValue(s.elem, arr.Items(), e, path+"["+strconv.Itoa(i)+"]")
			if ierr != nil {
				return nil, ierr
			}
			out[i] = nv
		}
		return wrap(out), nil
	case cStruct:
		if v.kind != jObject {
			return mismatch()
		}
		rec, ok := branch.(*avro.RecordSchema)
		if !ok || len(rec.Fields()) != len(s.fields) {
			return nil, &inferError{path, "the compiled schema has " + string(branch.Type()) + " where the record is"}
		}
		out := make(map[string]any, len(s.fields))
		for i, f := range s.fields {
			fv := v.member(f.name)
			if fv == nil {
				out[f.name] = nil
				continue
			}
			nv, ierr := inferredValue(f.schema, rec.Fields()[i].Type(), fv, path+"."+f.name)
			if ierr != nil {
				return nil, ierr
			}
			out[f.name] = nv
		}
		for _, m := range v.members {
			if s.field(m.name) != nil || m.value.kind == jNull || m.value.kind == jArray && len(m.value.elems) == 0 {
				continue
			}
			return nil, &inferError{path + "." + m.name, "field " + strconv.Quote(m.name) + " is not in the record the array's elements share " +
				"(another element of the array, with another shape inside, decided it): Debezium drops it silently, walbox refuses; give the array's elements one shape"}
		}
		return wrap(out), nil
	}
	return nil, &inferError{path, "unknown schema type"}
}

// inferredAvroConfig encodes arrays as Java's Avro does: one block with the
// item count and no byte size.
var inferredAvroConfig = avro.Config{
	BlockLength:            math.MaxInt32,
	DisableBlockSizeHeader: true,
}.Freeze()
