package eventrouter

import (
	"strings"
	"testing"
)

func expandOut(t *testing.T, payload string, c ConverterConfig) (string, bool) {
	t.Helper()
	s, v, partial := expandJSON("payload", payload, optString, false)
	if partial {
		// The inferred schema with the string: the record fails.
		return "(inferred schema, conversion failed)", true
	}
	if _, still := v.(string); still {
		return "", false
	}
	b, err := convert(c, s, v)
	if err != nil {
		return "ERR", true
	}
	return string(b), true
}

// Records that differed from Debezium's (Jackson) in the corners of
// table.expand.json.payload; each case failed before its fix.
func TestExpandJSONJacksonCorners(t *testing.T) {
	schemaless, withSchemas, str := ConverterConfig{Kind: JSONConverter}, ConverterConfig{Kind: JSONConverter, SchemasEnable: true}, ConverterConfig{Kind: StringConverter}
	tests := []struct {
		name, payload string
		c             ConverterConfig
		want          string // "" : not expanded, the payload stays a string
	}{
		// 1e999 is a DoubleNode of Infinity; Jackson writes non-finite
		// numbers as strings (QUOTE_NON_NUMERIC_NUMBERS): walbox wrote
		// the invalid {"x":Infinity}.
		{"infinity", `{"x":1e999,"y":-1e999}`, schemaless, `{"x":"Infinity","y":"-Infinity"}`},
		{"infinity with schemas", `{"x":1e999}`, withSchemas, `"payload":{"x":"Infinity"}`},
		{"infinity as a string", `{"x":1e999}`, str, `Struct{x=Infinity}`},
		// A lone surrogate is a Java char: Jackson writes it escaped, as
		// it writes every surrogate; StringConverter's UTF-8 encoder
		// replaces it with '?'. walbox wrote U+FFFD.
		{"lone high surrogate", `{"x":"a\uD800b"}`, schemaless, `{"x":"a\uD800b"}`},
		{"lone low surrogate", `{"x":"\uDC01"}`, schemaless, `{"x":"\uDC01"}`},
		{"reversed pair", `{"x":"\uDE00\uD83D"}`, schemaless, `{"x":"\uDE00\uD83D"}`},
		{"a pair stays a pair", `{"x":"\uD83D\uDE00"}`, schemaless, `{"x":"\uD83D\uDE00"}`},
		{"lone surrogate in a name", `{"\uD800":1}`, schemaless, `{"\uD800":1}`},
		{"lone surrogate as a string", `{"x":"a\uD800b"}`, str, `Struct{x=a?b}`},
		// Jackson's StreamReadConstraints (2.21 defaults): a number over
		// 1,000 digits, a string over 20,000,000 characters, a name over
		// 50,000, more than 1,000 nested containers fail the parse, and
		// Debezium keeps the string payload. walbox expanded them (or,
		// for the number, failed the row).
		{"1001 digits with a fraction", `{"x":1` + strings.Repeat("0", 999) + `.5}`, schemaless, ""},
		{"1001 digits", `{"x":` + strings.Repeat("1", 1001) + `}`, schemaless, ""},
		{"999 fraction digits", `{"x":1.` + strings.Repeat("5", 998) + `}`, schemaless, `{"x":1.5555555555555556}`},
		{"long name", `{"` + strings.Repeat("n", 50_001) + `":1}`, schemaless, ""},
		{"longest name", `{"` + strings.Repeat("n", 50_000) + `":1}`, schemaless, `{"` + strings.Repeat("n", 50_000) + `":1}`},
		{"1001 containers", `{"x":` + strings.Repeat("[", 999) + "{}" + strings.Repeat("]", 999) + `}`, schemaless, ""},
		{"1000 containers", `{"x":` + strings.Repeat("[", 998) + "{}" + strings.Repeat("]", 998) + `}`, schemaless, `{"x":` + strings.Repeat("[", 998) + "{}" + strings.Repeat("]", 998) + `}`},
		{"1000 containers and a number", `{"x":` + strings.Repeat("[", 999) + "1" + strings.Repeat("]", 999) + `}`, schemaless, `{"x":` + strings.Repeat("[", 999) + "1" + strings.Repeat("]", 999) + `}`},
		// Written with schemas, the envelope nests them deeper than
		// Jackson's StreamWriteConstraints allow: JsonConverter throws.
		{"1000 containers with schemas", `{"x":` + strings.Repeat("[", 999) + "1" + strings.Repeat("]", 999) + `}`, withSchemas, "ERR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, expanded := expandOut(t, tt.payload, tt.c)
			switch {
			case tt.want == "" && expanded:
				t.Errorf("expanded to %.80s; Jackson fails the parse and Debezium keeps the string", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Errorf("got %.200s, want %.200s", got, tt.want)
			}
		})
	}
}

// A string over 20,000,000 characters (UTF-16 units, as Java counts).
func TestExpandJSONLongString(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 40 MB")
	}
	if _, expanded := expandOut(t, `{"x":"`+strings.Repeat("s", 20_000_001)+`"}`, ConverterConfig{Kind: JSONConverter}); expanded {
		t.Error("a 20,000,001-character string was expanded")
	}
	// Ten million characters beyond U+FFFF are 20,000,000 UTF-16 units:
	// within the limit.
	if _, expanded := expandOut(t, `{"x":"`+strings.Repeat("😀", 10_000_000)+`"}`, ConverterConfig{Kind: JSONConverter}); !expanded {
		t.Error("a string of 20,000,000 UTF-16 units was not expanded")
	}
}
