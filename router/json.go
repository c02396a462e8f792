package router

import (
	"bytes"
	"encoding/json"

	"github.com/walbox/walbox/decoder"
)

// The router reads two things out of JSON columns: the top-level members of
// the headers object, in document order, and single keys for "column->>key"
// settings. Both run per event, so instead of json.Decoder (which allocates a
// token per key and value) the document is checked once per row with
// json.Valid (Router.jsonValid), which pools its scanner, and then walked by
// the small skipper below, which may assume well-formed input. Values are
// returned as sub-slices of the document wherever their text needs no
// rewriting.

// member is one top-level member of a JSON object, as raw text.
type member struct {
	key    []byte // between the quotes, escapes unresolved
	keyEsc bool   // key contains a backslash escape
	val    []byte // the value's full JSON text
}

// jsonDoc returns a JSON column's document text: the value itself, except a
// binary jsonb value, whose send form is a version byte (1) before the text.
func jsonDoc(typeOID uint32, v *decoder.Value) []byte {
	if v.Kind == decoder.KindBinary && typeOID == decoder.JSONBOID && len(v.Data) > 0 && v.Data[0] == 1 {
		return v.Data[1:]
	}
	return v.Data
}

// scanObject appends the top-level members of doc, which json.Valid
// accepted, to dst. If doc is not a JSON object it returns what it is instead
// ("a JSON array", ...).
func scanObject(doc []byte, dst []member) ([]member, string) {
	i := skipWS(doc, 0)
	if doc[i] != '{' {
		return dst, "a JSON " + jsonKind(doc[i]) + ", not an object"
	}
	i = skipWS(doc, i+1)
	for doc[i] != '}' {
		kEnd, esc := skipString(doc, i)
		m := member{key: doc[i+1 : kEnd-1], keyEsc: esc}
		i = skipWS(doc, kEnd)
		i = skipWS(doc, i+1) // past ':'
		vEnd := skipValue(doc, i)
		m.val = doc[i:vEnd]
		dst = append(dst, m)
		i = skipWS(doc, vEnd)
		if doc[i] == ',' {
			i = skipWS(doc, i+1)
		}
	}
	return dst, ""
}

// jsonGet implements doc->>key for a doc json.Valid accepted: the text of the
// last member named key (the member Postgres considers operative when a json
// document repeats a key).
func jsonGet(doc []byte, key string) ([]byte, fieldState) {
	i := skipWS(doc, 0)
	if doc[i] != '{' {
		return nil, fieldNotObject
	}
	var found []byte
	i = skipWS(doc, i+1)
	for doc[i] != '}' {
		kEnd, esc := skipString(doc, i)
		k := doc[i+1 : kEnd-1]
		i = skipWS(doc, kEnd)
		i = skipWS(doc, i+1)
		vEnd := skipValue(doc, i)
		if esc {
			if unquoteKey(k) == key { // rare: an escaped key
				found = doc[i:vEnd]
			}
		} else if string(k) == key {
			found = doc[i:vEnd]
		}
		i = skipWS(doc, vEnd)
		if doc[i] == ',' {
			i = skipWS(doc, i+1)
		}
	}
	switch {
	case found == nil:
		return nil, fieldNoKey
	case string(found) == "null":
		return nil, fieldJSONNull
	}
	return valueText(found), fieldOK
}

// valueText renders a member value the way ->> does: a string as its
// unescaped contents, anything else as compact JSON text.
func valueText(raw []byte) []byte {
	if raw[0] == '"' {
		body := raw[1 : len(raw)-1]
		if bytes.IndexByte(body, '\\') < 0 {
			return body
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return body // unreachable: raw was validated
		}
		return []byte(s)
	}
	if (raw[0] == '{' || raw[0] == '[') && bytes.ContainsAny(raw, " \t\r\n") {
		// jsonb renders containers with a space after ':' and ','.
		var buf bytes.Buffer
		buf.Grow(len(raw))
		if err := json.Compact(&buf, raw); err != nil {
			return raw // unreachable: raw was validated
		}
		return buf.Bytes()
	}
	return raw
}

// unquoteKey resolves the escapes in a member key's body (the text between
// its quotes). Only keys containing a backslash need it.
func unquoteKey(body []byte) string {
	quoted := make([]byte, 0, len(body)+2)
	quoted = append(quoted, '"')
	quoted = append(quoted, body...)
	quoted = append(quoted, '"')
	var s string
	if err := json.Unmarshal(quoted, &s); err != nil {
		return string(body) // unreachable: the document was validated
	}
	return s
}

func jsonKind(c byte) string {
	switch c {
	case '[':
		return "array"
	case '"':
		return "string"
	case 't', 'f':
		return "boolean"
	case 'n':
		return "null"
	}
	return "number"
}

// The skippers below assume a document json.Valid accepted; they never index
// past a closing token of valid JSON.

func skipWS(doc []byte, i int) int {
	for i < len(doc) && (doc[i] == ' ' || doc[i] == '\t' || doc[i] == '\n' || doc[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the offset just past the string starting at doc[i] ('"')
// and whether it contains an escape.
func skipString(doc []byte, i int) (int, bool) {
	esc := false
	for j := i + 1; j < len(doc); j++ {
		switch doc[j] {
		case '\\':
			esc = true
			j++
		case '"':
			return j + 1, esc
		}
	}
	return len(doc), esc
}

// skipValue returns the offset just past the value starting at doc[i].
func skipValue(doc []byte, i int) int {
	switch doc[i] {
	case '"':
		end, _ := skipString(doc, i)
		return end
	case '{', '[':
		depth := 0
		for j := i; j < len(doc); j++ {
			switch doc[j] {
			case '"':
				end, _ := skipString(doc, j)
				j = end - 1
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return j + 1
				}
			}
		}
		return len(doc)
	}
	j := i
	for j < len(doc) {
		switch doc[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}
