package debezium

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestParseProperties(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []Entry
		wantErr string
	}{
		{name: "equals", in: "a=b\n", want: []Entry{{"a", "b", 1}}},
		{name: "colon and blanks", in: "a : b c \n", want: []Entry{{"a", "b c ", 1}}},
		{name: "whitespace separator", in: "key value", want: []Entry{{"key", "value", 1}}},
		{name: "whitespace then equals", in: "key   =  value", want: []Entry{{"key", "value", 1}}},
		{name: "second separator is part of the value", in: "a==b", want: []Entry{{"a", "=b", 1}}},
		{name: "empty value", in: "a=\nb\n", want: []Entry{{"a", "", 1}, {"b", "", 2}}},
		{name: "comments and blank lines", in: "# c\n  ! c2\n\n \t\na=1\n", want: []Entry{{"a", "1", 5}}},
		{name: "comment line is not continued", in: "# c \\\na=1", want: []Entry{{"a", "1", 2}}},
		{name: "continuation", in: "a=x,\\\n    y,\\\n\tz\nb=2", want: []Entry{{"a", "x,y,z", 1}, {"b", "2", 4}}},
		{name: "even backslashes do not continue", in: "a=x\\\\\nb=2", want: []Entry{{"a", `x\`, 1}, {"b", "2", 2}}},
		{name: "continuation at end of file", in: "a=x\\", want: []Entry{{"a", "x", 1}}},
		{name: "CRLF and CR", in: "a=1\r\nb=2\rc=3", want: []Entry{{"a", "1", 1}, {"b", "2", 2}, {"c", "3", 3}}},
		{name: "escaped separators in key", in: `a\=b\:c\ d=v`, want: []Entry{{"a=b:c d", "v", 1}}},
		{name: "escapes", in: `a=\t\n\r\f\x\\`, want: []Entry{{"a", "\t\n\r\fx\\", 1}}},
		{name: "unicode escape", in: `a=caf\u00e9 \u20AC`, want: []Entry{{"a", "café €", 1}}},
		{name: "surrogate pair", in: `a=\uD83D\uDE00`, want: []Entry{{"a", "😀", 1}}},
		{name: "regex escape in value", in: `t=inventory\\.outbox`, want: []Entry{{"t", `inventory\.outbox`, 1}}},
		{name: "dollar placeholder", in: `r=${routedByValue}.events`, want: []Entry{{"r", "${routedByValue}.events", 1}}},
		{name: "last value wins, first position kept", in: "a=1\nb=2\na=3", want: []Entry{{"a", "3", 3}, {"b", "2", 2}}},
		{name: "leading blanks before key", in: "   a=1", want: []Entry{{"a", "1", 1}}},
		{name: "utf-8 kept", in: "a=naïve", want: []Entry{{"a", "naïve", 1}}},
		{name: "latin-1 bytes", in: "a=na\xefve", want: []Entry{{"a", "naïve", 1}}},
		{name: "malformed unicode escape", in: `a=\u12`, wantErr: `malformed \uXXXX`},
		{name: "malformed unicode digits", in: `a=\u12zz`, wantErr: `malformed \uXXXX`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseProperties("f.properties", []byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrSyntax) {
					t.Fatalf("err = %v, want %q wrapping ErrSyntax", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Entries(); !reflect.DeepEqual(got, tt.want) && !(len(got) == 0 && len(tt.want) == 0) {
				t.Errorf("entries = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestParseJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    map[string]string
		wantErr string
	}{
		{name: "REST body", in: `{"name": "outbox", "config": {"tasks.max": 1, "slot.name": "s", "extended.headers.enabled": false}}`,
			want: map[string]string{"name": "outbox", "tasks.max": "1", "slot.name": "s", "extended.headers.enabled": "false"}},
		{name: "config name wins", in: `{"name": "a", "config": {"name": "b"}}`, want: map[string]string{"name": "b"}},
		{name: "bare map", in: ` {"slot.name": "s"}`, want: map[string]string{"slot.name": "s"}},
		{name: "null value", in: `{"slot.name": null}`, wantErr: `key "slot.name": null`},
		{name: "object value", in: `{"config": {"a": {"b": 1}}}`, wantErr: `key "a": expected a string`},
		{name: "extra top-level", in: `{"name": "a", "config": {}, "tasks": []}`, wantErr: `unexpected top-level field "tasks"`},
		{name: "trailing text", in: `{"a": "b"} x`, wantErr: "text after"},
		{name: "not json", in: `{"a": `, wantErr: "not a JSON object"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse("c.json", []byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errors.Is(err, ErrSyntax) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, e := range p.Entries() {
				got[e.Key] = e.Value
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

// FuzzParseProperties checks that the parser never panics, and that what
// it returns survives a round trip through an escaped rendering.
func FuzzParseProperties(f *testing.F) {
	for _, s := range []string{
		"a=b", "a : b", "a\\\n b", "# c\n!d\ne f", `a=\u00e9\uD83D\uDE00`, `\=\:\ =\\`, "a=\\", "\r\n\r", `a=\u`, "k\\", "\\u0041=1",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := ParseProperties("fuzz", data)
		if err != nil {
			if !errors.Is(err, ErrSyntax) {
				t.Fatalf("error %v does not wrap ErrSyntax", err)
			}
			return
		}
		var b strings.Builder
		for _, e := range p.Entries() {
			b.WriteString(escapeForTest(e.Key, true))
			b.WriteByte('=')
			b.WriteString(escapeForTest(e.Value, false))
			b.WriteByte('\n')
		}
		q, err := ParseProperties("again", []byte(b.String()))
		if err != nil {
			t.Fatalf("re-parse of %q: %v", b.String(), err)
		}
		if !reflect.DeepEqual(p.Entries(), withLines(q.Entries(), p.Entries())) {
			t.Fatalf("round trip: %+v != %+v", q.Entries(), p.Entries())
		}
	})
}

// withLines copies the line numbers of want into got, which the round trip
// changes.
func withLines(got, want []Entry) []Entry {
	if len(got) != len(want) {
		return got
	}
	out := append([]Entry(nil), got...)
	for i := range out {
		out[i].Line = want[i].Line
	}
	return out
}

// escapeForTest writes s as java.util.Properties.store would.
func escapeForTest(s string, key bool) string {
	var b strings.Builder
	for i, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\f':
			b.WriteString(`\f`)
		case r == '=' || r == ':' || r == '#' || r == '!':
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == ' ' && (key || i == 0):
			b.WriteString(`\ `)
		case r < 0x20 || r > 0x7e:
			for _, u := range utf16Units(r) {
				b.WriteString(`\u`)
				b.WriteString(strings.ToUpper(hex4(u)))
			}
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

func utf16Units(r rune) []uint16 {
	if r >= 0x10000 {
		r -= 0x10000
		return []uint16{uint16(0xD800 + (r >> 10)), uint16(0xDC00 + (r & 0x3FF))}
	}
	return []uint16{uint16(r)}
}

func hex4(u uint16) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[u>>12], digits[u>>8&15], digits[u>>4&15], digits[u&15]})
}
