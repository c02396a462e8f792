package debezium

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrSyntax marks a configuration file that cannot be read as
// java.util.Properties or Connect JSON.
var ErrSyntax = errors.New("debezium: configuration syntax")

// Entry is one key of a configuration, with where it was read.
type Entry struct {
	Key   string
	Value string
	// Line is the (first) line of the entry in a .properties file; 0 for
	// JSON.
	Line int
}

// Properties is a configuration read from a file: its entries in file
// order, the last value of a key winning as in java.util.Properties.
type Properties struct {
	// Source names the file, for messages.
	Source  string
	entries []Entry
	index   map[string]int
	// Duplicates lists keys given more than once (the last one counts).
	Duplicates []string
}

// Get returns a key's value and whether it is set.
func (p *Properties) Get(key string) (string, bool) {
	if p == nil {
		return "", false
	}
	i, ok := p.index[key]
	if !ok {
		return "", false
	}
	return p.entries[i].Value, true
}

// Entries returns the entries in the order their keys first appeared, each
// with its last value.
func (p *Properties) Entries() []Entry {
	if p == nil {
		return nil
	}
	return append([]Entry(nil), p.entries...)
}

// Where names an entry's place for messages: "FILE:LINE" or "FILE".
func (p *Properties) Where(key string) string {
	if p == nil {
		return ""
	}
	i, ok := p.index[key]
	if !ok || p.entries[i].Line == 0 {
		return p.Source
	}
	return fmt.Sprintf("%s:%d", p.Source, p.entries[i].Line)
}

func (p *Properties) set(key, value string, line int) {
	if p.index == nil {
		p.index = map[string]int{}
	}
	if i, ok := p.index[key]; ok {
		p.entries[i].Value, p.entries[i].Line = value, line
		p.Duplicates = append(p.Duplicates, key)
		return
	}
	p.index[key] = len(p.entries)
	p.entries = append(p.entries, Entry{Key: key, Value: value, Line: line})
}

// NewProperties builds Properties from a map (tests, the REST JSON).
func NewProperties(source string, m map[string]string, order []string) *Properties {
	p := &Properties{Source: source}
	for _, k := range order {
		if v, ok := m[k]; ok {
			p.set(k, v, 0)
		}
	}
	return p
}

// ParseProperties reads data with the syntax of java.util.Properties.load:
// lines ending in \n, \r or \r\n; comment lines starting (after blanks)
// with # or !; a key ends at the first unescaped '=', ':' or blank, and
// blanks around the separator are skipped; a line ending in an odd number
// of backslashes continues on the next line, whose leading blanks are
// dropped; escapes \t \n \r \f, \uXXXX and \ followed by any other
// character (that character). A malformed \uXXXX is an error, as in Java.
//
// Java reads the bytes of a .properties stream as ISO-8859-1. walbox reads
// valid UTF-8 as UTF-8 (what the person who wrote the file meant) and any
// other byte as ISO-8859-1, like Java.
func ParseProperties(source string, data []byte) (*Properties, error) {
	p := &Properties{Source: source}
	text := decodeText(data)
	lr := lineReader{s: text}
	for {
		logical, line, ok := lr.next()
		if !ok {
			break
		}
		key, value, err := splitEntry(logical)
		if err != nil {
			return nil, fmt.Errorf("%w: %s:%d: %v", ErrSyntax, source, line, err)
		}
		p.set(key, value, line)
	}
	return p, nil
}

// decodeText returns data as a string: as is when it is valid UTF-8, else
// each byte as the ISO-8859-1 character it encodes.
func decodeText(data []byte) string {
	if utf8.Valid(data) {
		return string(data)
	}
	var b strings.Builder
	for _, c := range data {
		b.WriteRune(rune(c))
	}
	return b.String()
}

func isBlank(c byte) bool { return c == ' ' || c == '\t' || c == '\f' }

// lineReader yields logical lines: comments and blank lines skipped,
// continuations joined (the backslash-newline and the next line's leading
// blanks removed), with the number of the first natural line.
type lineReader struct {
	s    string
	pos  int
	line int
}

// natural returns the next natural line without its terminator.
func (r *lineReader) natural() (string, bool) {
	if r.pos >= len(r.s) {
		return "", false
	}
	start := r.pos
	i := strings.IndexAny(r.s[start:], "\r\n")
	r.line++
	if i < 0 {
		r.pos = len(r.s)
		return r.s[start:], true
	}
	end := start + i
	r.pos = end + 1
	if r.s[end] == '\r' && r.pos < len(r.s) && r.s[r.pos] == '\n' {
		r.pos++
	}
	return r.s[start:end], true
}

// continues reports whether a natural line ends with an odd number of
// backslashes.
func continues(s string) bool {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

func (r *lineReader) next() (string, int, bool) {
	for {
		nat, ok := r.natural()
		if !ok {
			return "", 0, false
		}
		first := r.line
		s := strings.TrimLeft(nat, " \t\f")
		if s == "" || s[0] == '#' || s[0] == '!' {
			continue // a comment line is never continued
		}
		var b strings.Builder
		for continues(s) {
			b.WriteString(s[:len(s)-1])
			nat, ok = r.natural()
			if !ok {
				s = ""
				break
			}
			s = strings.TrimLeft(nat, " \t\f")
		}
		b.WriteString(s)
		return b.String(), first, true
	}
}

// splitEntry splits a logical line into its unescaped key and value.
func splitEntry(s string) (key, value string, err error) {
	i := 0
	for i < len(s) {
		c := s[i]
		if c == '\\' {
			i += 2
			continue
		}
		if c == '=' || c == ':' || isBlank(c) {
			break
		}
		i++
	}
	if i > len(s) {
		i = len(s)
	}
	rawKey := s[:i]
	rest := s[i:]
	rest = strings.TrimLeft(rest, " \t\f")
	if rest != "" && (rest[0] == '=' || rest[0] == ':') {
		rest = strings.TrimLeft(rest[1:], " \t\f")
	}
	if key, err = unescape(rawKey); err != nil {
		return "", "", fmt.Errorf("key %q: %w", rawKey, err)
	}
	if value, err = unescape(rest); err != nil {
		return "", "", fmt.Errorf("value of %q: %w", key, err)
	}
	return key, value, nil
}

// unescape resolves Properties escapes.
func unescape(s string) (string, error) {
	if !strings.Contains(s, `\`) {
		return s, nil
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(s) {
			break // a trailing lone backslash is dropped, as Java does
		}
		switch c = s[i]; c {
		case 't':
			b.WriteByte('\t')
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 'f':
			b.WriteByte('\f')
		case 'u':
			if i+5 > len(s) {
				return "", errors.New(`malformed \uXXXX escape: expected 4 hexadecimal digits`)
			}
			n, err := strconv.ParseUint(s[i+1:i+5], 16, 16)
			if err != nil {
				// Not the digits themselves: the value may be a password.
				return "", fmt.Errorf(`malformed \uXXXX escape at character %d: expected 4 hexadecimal digits`, i)
			}
			i += 4
			r := rune(n)
			// A surrogate pair written as two escapes is one character.
			if utf16IsHigh(r) && i+7 <= len(s) && s[i+1] == '\\' && s[i+2] == 'u' {
				if lo, err := strconv.ParseUint(s[i+3:i+7], 16, 16); err == nil && utf16IsLow(rune(lo)) {
					r = 0x10000 + (r-0xD800)<<10 + (rune(lo) - 0xDC00)
					i += 6
				}
			}
			b.WriteRune(r)
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), nil
}

func utf16IsHigh(r rune) bool { return r >= 0xD800 && r < 0xDC00 }
func utf16IsLow(r rune) bool  { return r >= 0xDC00 && r < 0xE000 }
