package schemareg

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"testing"
)

// parseJSONTreeTokens is parseJSONTree by encoding/json's token reader, the
// reference the scanner is compared with.
func parseJSONTreeTokens(doc []byte) (*jvalue, error) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	v, err := tokenValue(dec)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one value")
	}
	return v, nil
}

func tokenValue(dec *json.Decoder) (*jvalue, error) {
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
		if t == '[' {
			v := &jvalue{kind: jArray}
			for dec.More() {
				e, err := tokenValue(dec)
				if err != nil {
					return nil, err
				}
				v.elems = append(v.elems, e)
			}
			_, err := dec.Token()
			return v, err
		}
		v := &jvalue{kind: jObject}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, err
			}
			name := kt.(string)
			e, err := tokenValue(dec)
			if err != nil {
				return nil, err
			}
			if old := v.member(name); old != nil {
				*old = *e
				continue
			}
			v.members = append(v.members, jmember{name: name, value: e})
		}
		_, err := dec.Token()
		return v, err
	}
	return nil, errors.New("unexpected token")
}

var jsonTreeSeeds = []string{
	`{}`, `[]`, `{"a":1,"b":"x","a":[1,2.5,-0,1E+2,null,true,false]}`,
	` { "b" : 1 , "a" : [ 1 , 2 ] , "b" : "again", "e": "\ud83d\ude00 😀 \u00e9 \" \\ \/ \b\f\n\r\t" } `,
	`{"k":"\ud800 lone","s":"` + "\xff\xfe invalid utf-8" + `","u":"é"}`,
	`{"o":{"p":{"q":[[{"r":{}}]]}}}`, `"x"`, `12`, `null`,
	`{"a":1}{"b":2}`, `{"a":}`, `{"a":1,}`, `[1 2]`, `{"a" 1}`, ``, `{"a":"\x"}`, "{\"a\":\"\x01\"}",
}

// TestJSONTreeMatchesEncodingJSON: the scanner reads every seed as
// encoding/json's token reader does, and refuses what it refuses.
func TestJSONTreeMatchesEncodingJSON(t *testing.T) {
	for _, doc := range jsonTreeSeeds {
		compareJSONTree(t, []byte(doc))
	}
}

func FuzzJSONTree(f *testing.F) {
	for _, doc := range jsonTreeSeeds {
		f.Add([]byte(doc))
	}
	f.Fuzz(compareJSONTree)
}

func compareJSONTree(t *testing.T, doc []byte) {
	got, gerr := parseJSONTree(doc)
	want, werr := parseJSONTreeTokens(doc)
	if (gerr == nil) != (werr == nil) {
		t.Fatalf("%q: scanner error %v, encoding/json error %v", doc, gerr, werr)
	}
	if gerr == nil && !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: the trees differ", doc)
	}
}
