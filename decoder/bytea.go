package decoder

import (
	"encoding/hex"
	"fmt"
)

// DecodeBytea decodes the text output of a bytea column, the form pgoutput
// sends for it unless binary mode is on. Both settings of the server's
// bytea_output are understood, chosen the way Postgres' own byteain does:
//
//   - hex (the default since 9.0): `\x` followed by two hex digits per byte,
//     either case;
//   - escape: printable bytes as themselves, a backslash as `\\`, any byte as
//     `\ooo` (three octal digits, the first 0-3).
//
// Unlike byteain it does not accept whitespace between hex digit pairs: the
// server never outputs any, so a space means the value is not bytea output.
//
// The result is always a new slice (non-nil, possibly empty), independent of
// text. Errors wrap ErrMalformed. Safe for concurrent use.
func DecodeBytea(text []byte) ([]byte, error) {
	if len(text) >= 2 && text[0] == '\\' && text[1] == 'x' {
		digits := text[2:]
		if len(digits)%2 != 0 {
			return nil, fmt.Errorf("%w: bytea hex format: odd number of hex digits (%d)", ErrMalformed, len(digits))
		}
		out := make([]byte, len(digits)/2)
		if _, err := hex.Decode(out, digits); err != nil {
			return nil, fmt.Errorf("%w: bytea hex format: %v", ErrMalformed, err)
		}
		return out, nil
	}
	return decodeByteaEscape(text)
}

// decodeByteaEscape decodes the escape format. Output is never longer than
// the input, so one allocation of len(text) bytes suffices.
func decodeByteaEscape(text []byte) ([]byte, error) {
	out := make([]byte, 0, len(text))
	for i := 0; i < len(text); {
		c := text[i]
		if c != '\\' {
			out = append(out, c)
			i++
			continue
		}
		switch {
		case i+3 < len(text) && isOctal(text[i+1], '3') && isOctal(text[i+2], '7') && isOctal(text[i+3], '7'):
			out = append(out, (text[i+1]-'0')<<6|(text[i+2]-'0')<<3|(text[i+3]-'0'))
			i += 4
		case i+1 < len(text) && text[i+1] == '\\':
			out = append(out, '\\')
			i += 2
		default:
			return nil, fmt.Errorf("%w: bytea escape format: backslash at offset %d is followed by neither "+
				"a backslash nor three octal digits", ErrMalformed, i)
		}
	}
	return out, nil
}

// isOctal reports whether c is an octal digit no greater than hi.
func isOctal(c, hi byte) bool { return c >= '0' && c <= hi }
