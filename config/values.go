package config

import (
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// sizeUnits are the accepted size suffixes, matched case-insensitively.
// KB, MB and GB are decimal, KiB, MiB and GiB binary.
var sizeUnits = map[string]int64{
	"":    1,
	"b":   1,
	"kb":  1000,
	"mb":  1000 * 1000,
	"gb":  1000 * 1000 * 1000,
	"kib": 1 << 10,
	"mib": 1 << 20,
	"gib": 1 << 30,
}

// parseSize parses a whole number of bytes with an optional unit: "1048576",
// "64MiB", "64 MiB", "1MB". Fractions and signs are not accepted.
func parseSize(s string) (int64, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 {
		return 0, errors.New("size does not start with a digit")
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, err
	}
	mult, ok := sizeUnits[strings.ToLower(strings.TrimSpace(s[i:]))]
	if !ok {
		return 0, fmt.Errorf("unknown size unit %q", s[i:])
	}
	if n > math.MaxInt64/mult {
		return 0, errors.New("size overflows")
	}
	return n * mult, nil
}

// formatSize writes n with the largest binary unit that divides it exactly,
// so that defaults read as they were written (64MiB, 1000012).
func formatSize(n int64) string {
	switch {
	case n == 0:
		return "0"
	case n%(1<<30) == 0:
		return strconv.FormatInt(n>>30, 10) + "GiB"
	case n%(1<<20) == 0:
		return strconv.FormatInt(n>>20, 10) + "MiB"
	case n%(1<<10) == 0:
		return strconv.FormatInt(n>>10, 10) + "KiB"
	}
	return strconv.FormatInt(n, 10)
}

// splitList splits a comma-separated list, trimming spaces around items and
// dropping empty ones (a trailing comma is harmless).
func splitList(s string) []string {
	var out []string
	for item := range strings.SplitSeq(s, ",") {
		if item = strings.TrimSpace(item); item != "" {
			out = append(out, item)
		}
	}
	return out
}

// hostPortProblem says what is wrong with a host:port address, or "".
// needHost: a broker needs a host and a non-zero port; a listen address
// may omit the host (":9187") and use port 0.
func hostPortProblem(s string, needHost bool) string {
	host, port, err := net.SplitHostPort(s)
	if err != nil {
		var ae *net.AddrError
		if errors.As(err, &ae) {
			return ae.Err
		}
		return err.Error()
	}
	if needHost && host == "" {
		return "the host is empty"
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || (needHost && p == 0) {
		return "the port must be a number from 1 to 65535"
	}
	return ""
}

// maxTopicLen is Kafka's limit on topic names.
const maxTopicLen = 249

func isTopicChar(r rune) bool {
	return r < unicode.MaxASCII && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
}

// topicNameProblem says why s is not a legal Kafka topic name, or "".
func topicNameProblem(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case s == "." || s == "..":
		return `"." and ".." are reserved`
	case len(s) > maxTopicLen:
		return fmt.Sprintf("it is %d characters long, the limit is %d", len(s), maxTopicLen)
	}
	for i, r := range s {
		if !isTopicChar(r) {
			return fmt.Sprintf("%q at offset %d is not allowed; use letters, digits, '.', '_' and '-'", r, i)
		}
	}
	return ""
}

// TopicPlaceholders returns the placeholder names of a topic template such
// as "outbox.event.{aggregate_type}", in order of appearance, or an error
// saying what is wrong with its syntax: an unclosed, unmatched or nested
// brace, an empty placeholder, a placeholder that is not a column-like name
// (letters, digits, _), or literal text that cannot be part of a Kafka topic
// name. It does not check which names the router understands.
func TopicPlaceholders(template string) ([]string, error) {
	if template == "" {
		return nil, errors.New("the template is empty")
	}
	var names []string
	literal := 0 // bytes of literal text, to check the length of a fixed topic
	for i := 0; i < len(template); i++ {
		switch c := template[i]; c {
		case '{':
			end := strings.IndexAny(template[i+1:], "{}")
			if end < 0 {
				return nil, fmt.Errorf(`unclosed "{" at offset %d`, i)
			}
			end += i + 1
			if template[end] == '{' {
				return nil, fmt.Errorf(`nested "{" at offset %d inside the placeholder opened at offset %d`, end, i)
			}
			name := template[i+1 : end]
			if name == "" {
				return nil, fmt.Errorf(`empty placeholder "{}" at offset %d`, i)
			}
			for _, r := range name {
				if !(r < unicode.MaxASCII && (unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_')) {
					return nil, fmt.Errorf("placeholder {%s} at offset %d: %q is not allowed; a placeholder names a column with letters, digits and _", name, i, r)
				}
			}
			names = append(names, name)
			i = end
		case '}':
			return nil, fmt.Errorf(`unmatched "}" at offset %d`, i)
		default:
			if r, _ := utf8.DecodeRuneInString(template[i:]); !isTopicChar(r) {
				return nil, fmt.Errorf("%q at offset %d is not allowed in a Kafka topic name; use letters, digits, '.', '_' and '-'", r, i)
			}
			literal++
		}
	}
	if len(names) == 0 {
		if why := topicNameProblem(template); why != "" {
			return nil, errors.New(why)
		}
	} else if literal > maxTopicLen {
		return nil, fmt.Errorf("its fixed text alone is %d characters long, the topic limit is %d", literal, maxTopicLen)
	}
	return names, nil
}

func checkTopicTemplate(t string) error {
	if t == "" {
		return missingf("expected a topic or template such as outbox.event.{aggregate_type}")
	}
	if _, err := TopicPlaceholders(t); err != nil {
		return badf("%v; expected a topic or template such as outbox.event.{aggregate_type}", err)
	}
	return nil
}

// maxIdentLen is NAMEDATALEN-1: Postgres silently truncates longer names,
// so a longer name here would never match what the server reports.
const maxIdentLen = 63

// checkIdent checks a Postgres name as stored in the catalog. walbox quotes
// names wherever it writes them into SQL, so the only constraints are the
// server's; quotes are rejected because they mean the user quoted the name
// by hand, which would make it part of the name.
func checkIdent(s, what string) error {
	if why := identProblem(s); why != "" {
		return badf("expected a %s (%s)", what, why)
	}
	return nil
}

func identProblem(s string) string {
	switch {
	case s == "":
		return "it is empty"
	case len(s) > maxIdentLen:
		return fmt.Sprintf("it is %d bytes long, Postgres keeps only %d", len(s), maxIdentLen)
	case strings.ContainsRune(s, '"'):
		return "write it without quotes, exactly as stored; names are case-sensitive here"
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return fmt.Sprintf("it contains the control character %q", r)
		}
	}
	return ""
}

func checkTable(t string) error {
	if t == "" {
		return missingf("expected schema.table such as public.outbox")
	}
	parts := strings.Split(t, ".")
	if len(parts) > 2 {
		return badf("expected schema.table such as public.outbox (a name containing a dot is not supported)")
	}
	for _, p := range parts {
		if why := identProblem(p); why != "" {
			return badf("expected schema.table such as public.outbox (%q: %s)", p, why)
		}
	}
	return nil
}
