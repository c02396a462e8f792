package decoder

import (
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"testing"
)

func TestDecodeBytea(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    []byte
		wantErr bool
	}{
		{name: "hex empty", in: `\x`, want: []byte{}},
		{name: "hex", in: `\x00ff7f80`, want: []byte{0x00, 0xff, 0x7f, 0x80}},
		{name: "hex upper case", in: `\xDEADbeef`, want: []byte{0xde, 0xad, 0xbe, 0xef}},
		{name: "hex JSON", in: `\x7b2261223a317d`, want: []byte(`{"a":1}`)},
		{name: "hex odd digits", in: `\x123`, wantErr: true},
		{name: "hex bad digit", in: `\x1g`, wantErr: true},
		{name: "hex whitespace", in: `\x12 34`, wantErr: true},
		{name: "escape empty", in: ``, want: []byte{}},
		{name: "escape printable", in: `hello world`, want: []byte("hello world")},
		{name: "escape backslash", in: `a\\b`, want: []byte(`a\b`)},
		{name: "escape octal", in: `\000\001\377\\\134x`, want: []byte{0x00, 0x01, 0xff, '\\', '\\', 'x'}},
		{
			// What byteaout writes for bytes 0x1f..0x7f with bytea_output=escape.
			name: "escape range edges",
			in:   `\037 ~\177`,
			want: []byte{0x1f, ' ', '~', 0x7f},
		},
		{name: "escape lone trailing backslash", in: `abc\`, wantErr: true},
		{name: "escape backslash then letter", in: `\n`, wantErr: true},
		{name: "escape octal first digit over 3", in: `\400`, wantErr: true},
		{name: "escape octal truncated", in: `\01`, wantErr: true},
		{name: "escape octal digit 8", in: `\018`, wantErr: true},
		// "\X" is not the hex prefix (byteain checks a lower-case x).
		{name: "upper X is escape format", in: `\X00`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeBytea([]byte(tt.in))
			if tt.wantErr {
				if !errors.Is(err, ErrMalformed) {
					t.Fatalf("DecodeBytea(%q) err = %v, want ErrMalformed", tt.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("DecodeBytea(%q): %v", tt.in, err)
			}
			if got == nil || !bytes.Equal(got, tt.want) {
				t.Errorf("DecodeBytea(%q) = %#v, want %#v", tt.in, got, tt.want)
			}
		})
	}
}

func TestDecodeByteaCopies(t *testing.T) {
	for _, in := range []string{`plain`, `\x706c61696e`} {
		buf := []byte(in)
		got, err := DecodeBytea(buf)
		if err != nil {
			t.Fatal(err)
		}
		clear(buf)
		if string(got) != "plain" {
			t.Errorf("DecodeBytea(%q) result changed with its input: %q", in, got)
		}
	}
}

// encodeByteaEscape is byteaout with bytea_output = escape.
func encodeByteaEscape(b []byte) []byte {
	var out []byte
	for _, c := range b {
		switch {
		case c == '\\':
			out = append(out, `\\`...)
		case c < 0x20 || c > 0x7e:
			out = fmt.Appendf(out, `\%03o`, c)
		default:
			out = append(out, c)
		}
	}
	return out
}

// encodeByteaHex is byteaout with bytea_output = hex.
func encodeByteaHex(b []byte) []byte {
	return append([]byte(`\x`), hex.EncodeToString(b)...)
}

func FuzzDecodeBytea(f *testing.F) {
	for _, seed := range [][]byte{nil, {0}, []byte(`\x41`), []byte(`{"a":1}`), {0xff, '\\', 0x1f, 0x7f}} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// Property: both output formats of any byte string decode back to it.
		for _, enc := range [][]byte{encodeByteaHex(b), encodeByteaEscape(b)} {
			got, err := DecodeBytea(enc)
			if err != nil {
				t.Fatalf("DecodeBytea(%q): %v", enc, err)
			}
			if !bytes.Equal(got, b) {
				t.Fatalf("DecodeBytea(%q) = %x, want %x", enc, got, b)
			}
		}
		// Property: arbitrary input never panics, and errors are ErrMalformed.
		if _, err := DecodeBytea(b); err != nil && !errors.Is(err, ErrMalformed) {
			t.Fatalf("DecodeBytea(%q): error %v does not wrap ErrMalformed", b, err)
		}
	})
}
