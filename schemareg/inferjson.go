package schemareg

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
)

// The JSON tree the inferred mode reads a payload into: objects keep their
// members in document order, as Jackson's ObjectNode (which Debezium's
// EventRouter parses the payload with) does, a repeated key keeping its
// first place and its last value; numbers keep their text, so that they
// are classified as Jackson classifies them.

// jkind is a JSON value's kind.
type jkind uint8

const (
	jNull jkind = iota
	jBool
	jNumber
	jString
	jArray
	jObject
)

// jvalue is one JSON value.
type jvalue struct {
	kind    jkind
	b       bool
	text    string // a string's value, a number's text
	elems   []*jvalue
	members []jmember
}

type jmember struct {
	name  string
	value *jvalue
}

// member returns the object's member called name, or nil.
func (v *jvalue) member(name string) *jvalue {
	for i := range v.members {
		if v.members[i].name == name {
			return v.members[i].value
		}
	}
	return nil
}

// maxJSONDepth bounds how deep a payload may nest (Jackson's default
// StreamReadConstraints allow 1000 levels).
const maxJSONDepth = 1000

// parseJSONTree reads doc, one JSON value.
func parseJSONTree(doc []byte) (*jvalue, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	v, err := readJSONValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one value")
	}
	return v, nil
}

func readJSONValue(dec *json.Decoder, depth int) (*jvalue, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("nested deeper than " + strconv.Itoa(maxJSONDepth) + " levels")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case nil:
		return &jvalue{kind: jNull}, nil
	case bool:
		return &jvalue{kind: jBool, b: t}, nil
	case json.Number:
		return &jvalue{kind: jNumber, text: string(t)}, nil
	case string:
		return &jvalue{kind: jString, text: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := &jvalue{kind: jArray}
			for dec.More() {
				e, err := readJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				v.elems = append(v.elems, e)
			}
			_, err := dec.Token()
			return v, err
		case '{':
			v := &jvalue{kind: jObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				name, _ := kt.(string)
				e, err := readJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				replaced := false
				for i := range v.members {
					if v.members[i].name == name {
						v.members[i].value = e
						replaced = true
						break
					}
				}
				if !replaced {
					v.members = append(v.members, jmember{name: name, value: e})
				}
			}
			_, err := dec.Token()
			return v, err
		}
	}
	return nil, errors.New("unexpected token")
}

// describe renders v shortly for messages, as Jackson's asText does for
// scalars.
func (v *jvalue) describe() string {
	switch v.kind {
	case jNull:
		return "null"
	case jBool:
		return strconv.FormatBool(v.b)
	case jNumber:
		return v.text
	case jString:
		s := v.text
		if len(s) > 40 {
			s = s[:40] + "..."
		}
		return strconv.Quote(s)
	case jArray:
		return "an array"
	}
	return "an object"
}

// kindName is the Jackson node type's name, as Debezium's messages give it.
func (k jkind) kindName() string {
	return [...]string{"NULL", "BOOLEAN", "NUMBER", "STRING", "ARRAY", "OBJECT"}[k]
}

// numberType classifies a JSON number as Jackson's tree model does: an
// integer that fits 32 bits is an int (int32), one that fits 64 bits a long
// (int64), a larger one a BigInteger; a number with a fraction or an
// exponent is a double (float64).
func numberType(text string) ctype {
	if strings.ContainsAny(text, ".eE") {
		return cFloat64
	}
	if _, err := strconv.ParseInt(text, 10, 32); err == nil {
		return cInt32
	}
	if _, err := strconv.ParseInt(text, 10, 64); err == nil {
		return cInt64
	}
	return cBigInteger
}
