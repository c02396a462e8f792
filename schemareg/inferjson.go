package schemareg

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
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

// parseJSONTree reads doc, one JSON value. The document is checked with
// json.Valid first, then read by a scanner that only needs to find the
// tokens of valid JSON; a string with an escape or invalid UTF-8 is
// decoded by encoding/json (invalid UTF-8 becomes U+FFFD, as it does
// there). The tests compare it with encoding/json's token reader.
func parseJSONTree(doc []byte) (*jvalue, error) {
	if !json.Valid(doc) {
		// encoding/json says what is wrong.
		var v any
		err := json.Unmarshal(doc, &v)
		if err == nil {
			err = errors.New("invalid JSON")
		}
		return nil, err
	}
	p := &jsonScanner{b: doc}
	return p.value(0)
}

// jsonScanner reads a valid JSON document.
type jsonScanner struct {
	b []byte
	i int
}

func (p *jsonScanner) ws() {
	for p.i < len(p.b) {
		switch p.b[p.i] {
		case ' ', '\t', '\n', '\r':
			p.i++
		default:
			return
		}
	}
}

func (p *jsonScanner) value(depth int) (*jvalue, error) {
	if depth > maxJSONDepth {
		return nil, errors.New("nested deeper than " + strconv.Itoa(maxJSONDepth) + " levels")
	}
	p.ws()
	switch c := p.b[p.i]; c {
	case '{':
		p.i++
		v := &jvalue{kind: jObject}
		p.ws()
		if p.b[p.i] == '}' {
			p.i++
			return v, nil
		}
		for {
			p.ws()
			name, err := p.str()
			if err != nil {
				return nil, err
			}
			p.ws()
			p.i++ // ':'
			e, err := p.value(depth + 1)
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
			p.ws()
			if p.b[p.i] == '}' {
				p.i++
				return v, nil
			}
			p.i++ // ','
		}
	case '[':
		p.i++
		v := &jvalue{kind: jArray}
		p.ws()
		if p.b[p.i] == ']' {
			p.i++
			return v, nil
		}
		for {
			e, err := p.value(depth + 1)
			if err != nil {
				return nil, err
			}
			v.elems = append(v.elems, e)
			p.ws()
			if p.b[p.i] == ']' {
				p.i++
				return v, nil
			}
			p.i++ // ','
		}
	case '"':
		s, err := p.str()
		if err != nil {
			return nil, err
		}
		return &jvalue{kind: jString, text: s}, nil
	case 't':
		p.i += 4
		return &jvalue{kind: jBool, b: true}, nil
	case 'f':
		p.i += 5
		return &jvalue{kind: jBool}, nil
	case 'n':
		p.i += 4
		return &jvalue{kind: jNull}, nil
	default:
		start := p.i
		for p.i < len(p.b) && strings.IndexByte("+-0123456789.eE", p.b[p.i]) >= 0 {
			p.i++
		}
		return &jvalue{kind: jNumber, text: string(p.b[start:p.i])}, nil
	}
}

// str reads the string at p.i.
func (p *jsonScanner) str() (string, error) {
	start := p.i
	p.i++
	plain := true
	for p.b[p.i] != '"' {
		if p.b[p.i] == '\\' {
			plain = false
			p.i++
		} else if p.b[p.i] >= utf8.RuneSelf {
			plain = false
		}
		p.i++
	}
	p.i++
	raw := p.b[start:p.i]
	if plain || (utf8.Valid(raw) && bytes.IndexByte(raw, '\\') < 0) {
		return string(raw[1 : len(raw)-1]), nil
	}
	var s string
	err := json.Unmarshal(raw, &s)
	return s, err
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
