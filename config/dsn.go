package config

import (
	"cmp"
	"errors"
	"maps"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// redactMask replaces passwords in anything walbox shows: errors, Redacted.
const redactMask = "xxxxx"

const expectDSN = `expected a libpq URL such as postgres://walbox:secret@db:5432/app or a key=value DSN such as "host=db user=walbox dbname=app"`

// checkDSN parses the DSN the way the replication connection will, so that
// a malformed one fails at startup with a message naming the option. The
// message never contains the password: pgx redacts its own error text only
// on a best-effort basis, so the reason is scrubbed again here.
func checkDSN(dsn string) error {
	if dsn == "" {
		return missingf("%s", expectDSN)
	}
	if _, err := pgconn.ParseConfig(dsn); err != nil {
		return badf("%s; %s", dsnParseReason(dsn, err), expectDSN)
	}
	return nil
}

// dsnParseReason is pgx's explanation without the connection string it
// echoes (the option's value is shown, redacted, by OptionError) and
// without any secret of dsn.
func dsnParseReason(dsn string, err error) string {
	text := err.Error()
	var pe *pgconn.ParseConfigError
	if errors.As(err, &pe) {
		// The exact prefix pgx writes before its reason: "cannot parse `…`: ".
		prefix := pgconn.NewParseConfigError(pe.ConnString, "", nil).Error()
		text = strings.TrimPrefix(text, prefix)
	}
	_, secrets := redactDSN(dsn)
	text, ok := scrubSecrets(text, secrets)
	switch {
	case !ok:
		return "it cannot be parsed (details withheld, they would reveal the password)"
	case text == "":
		return "it cannot be parsed"
	}
	return "it cannot be parsed: " + text
}

// scrubSecrets replaces every secret in text by the mask. A secret shorter
// than 4 bytes is too likely to match ordinary text to be replaced; if one
// occurs, scrubSecrets gives up and returns false. Parsers quote the piece
// of input they choke on, which may be a fragment of a password (pgx
// reports the text after an unescaped '&' in a URL password as a query
// key), so a quoted string that is part of a secret is masked too.
func scrubSecrets(text string, secrets []string) (string, bool) {
	// Longest first, so that a secret containing another is replaced whole.
	slices.SortFunc(secrets, func(a, b string) int { return cmp.Compare(len(b), len(a)) })
	for _, s := range secrets {
		if s == "" || !strings.Contains(text, s) {
			continue
		}
		if len(s) < 4 {
			return "", false
		}
		text = strings.ReplaceAll(text, s, redactMask)
	}
	text = quotedRE.ReplaceAllStringFunc(text, func(q string) string {
		inner := q[1 : len(q)-1]
		for _, s := range secrets {
			if inner != "" && strings.Contains(s, inner) {
				return `"` + redactMask + `"`
			}
		}
		return q
	})
	return text, true
}

var quotedRE = regexp.MustCompile(`"[^"]*"`)

// redactDSN returns dsn with its passwords replaced by the mask, and the
// text it removed (raw and decoded) so that callers can scrub it from
// messages that quote parts of dsn.
//
// It handles both forms pgx accepts, and is deliberately more eager than
// the parser, because a DSN being redacted is often one that failed to
// parse, and a malformed one has no reliable structure:
//
//   - URL: everything from the first ':' after the scheme to the LAST '@'
//     (the parser stops at the first '@' before a '/', so a password
//     containing '@' or '/' is still covered), and the value of every
//     password= or sslpassword= query parameter.
//   - key=value: the value of password and sslpassword (quoted or not, keys
//     compared case-insensitively), up to the end of the string when a quote
//     is unterminated; any word without '=' (a password typed without its
//     key); and any word that contains '@' or "://" is treated as a URL,
//     which catches user:pass@host typed without a scheme.
//   - URL without '@': a port that is not a number (postgres://u:pass/db).
//
// Over-masking garbles only malformed DSNs and unusual ones (an '@' in a
// query value masks from the first ':' up to it); it never reveals more.
func redactDSN(dsn string) (string, []string) {
	var spans [][2]int
	trimmed := strings.TrimLeft(dsn, asciiSpaces)
	off := len(dsn) - len(trimmed)
	if p, ok := urlPrefix(trimmed); ok {
		spans = urlSpans(dsn, off+len(p))
	} else {
		spans = append(wordSpans(dsn), keywordSpans(dsn)...)
	}
	return applySpans(dsn, spans)
}

const asciiSpaces = " \t\n\r\v\f"

func urlPrefix(s string) (string, bool) {
	for _, p := range []string{"postgresql://", "postgres://"} {
		if strings.HasPrefix(s, p) {
			return p, true
		}
	}
	return "", false
}

// urlSpans returns the password spans of the URL-like text s[start:],
// offsets relative to s.
func urlSpans(s string, start int) [][2]int {
	var spans [][2]int
	rest := s[start:]
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		if c := strings.IndexByte(rest[:at], ':'); c >= 0 {
			spans = append(spans, [2]int{start + c + 1, start + at})
		}
	} else {
		spans = append(spans, portSpans(rest, start)...)
	}
	// Query parameters: look after every '?' and '&', not only the first
	// '?', in case one is part of an unescaped password.
	for i := 0; i < len(rest); i++ {
		if rest[i] != '?' && rest[i] != '&' {
			continue
		}
		eq := strings.IndexAny(rest[i+1:], "=&#")
		if eq < 0 || rest[i+1+eq] != '=' {
			continue
		}
		key := rest[i+1 : i+1+eq]
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
		if !isPasswordKey(key) {
			continue
		}
		vstart := i + 1 + eq + 1
		spans = append(spans, [2]int{start + vstart, start + queryValueEnd(rest, vstart)})
	}
	return spans
}

// portSpans covers a URL without '@' whose user forgot "@host":
// postgres://user:s3cret/db puts the password where the port goes. A port
// that is not a number is masked.
func portSpans(rest string, start int) [][2]int {
	var spans [][2]int
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	pos := 0
	for hostport := range strings.SplitSeq(rest[:end], ",") {
		// The port follows the last ':', unless that ':' is inside an
		// [IPv6] address.
		c := strings.LastIndexByte(hostport, ':')
		if c >= 0 && c > strings.LastIndexByte(hostport, ']') {
			if port := hostport[c+1:]; strings.Trim(port, "0123456789") != "" {
				spans = append(spans, [2]int{start + pos + c + 1, start + pos + len(hostport)})
			}
		}
		pos += len(hostport) + 1
	}
	return spans
}

// queryValueEnd finds where a query value starting at rest[i] ends: at an
// '&' that starts another key=value pair, or the end. An '&' not followed by
// key= is taken to be part of an unescaped password.
func queryValueEnd(rest string, i int) int {
	for j := i; j < len(rest); j++ {
		if rest[j] != '&' {
			continue
		}
		k := j + 1
		for k < len(rest) && isKeyByte(rest[k]) {
			k++
		}
		if k > j+1 && k < len(rest) && rest[k] == '=' {
			return j
		}
	}
	return len(rest)
}

func isKeyByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '%' || c == '.' || c == '-'
}

func isPasswordKey(k string) bool {
	return strings.EqualFold(k, "password") || strings.EqualFold(k, "sslpassword")
}

// wordSpans treats each space-separated word of a key=value DSN that looks
// like a URL or a user:pass@host as a URL.
func wordSpans(s string) [][2]int {
	var spans [][2]int
	for i := 0; i < len(s); {
		for i < len(s) && strings.IndexByte(asciiSpaces, s[i]) >= 0 {
			i++
		}
		j := i
		for j < len(s) && strings.IndexByte(asciiSpaces, s[j]) < 0 {
			j++
		}
		word := s[i:j]
		if strings.Contains(word, "@") || strings.Contains(word, "://") {
			start := i
			if k := strings.Index(word, "://"); k >= 0 {
				start = i + k + 3
			}
			spans = append(spans, urlSpans(s[:j], start)...)
		}
		i = j
	}
	return spans
}

// keyword is one word of a key=value DSN as libpq tokenizes it: spaces may
// surround '=', a value is a run of non-spaces or a single-quoted string,
// and a backslash escapes the next byte in both. A word without '=' has
// hasValue false and its text in key.
type keyword struct {
	key              string
	start, keyEnd    int // the word's start and the end of its key
	valStart, valEnd int // the value, quotes included; valid when hasValue
	hasValue         bool
}

// scanKeywords calls fn for every word of the key=value DSN s.
func scanKeywords(s string, fn func(keyword)) {
	isSpace := func(c byte) bool { return strings.IndexByte(asciiSpaces, c) >= 0 }
	i := 0
	for i < len(s) {
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) {
			return
		}
		kw := keyword{start: i}
		for i < len(s) && s[i] != '=' && !isSpace(s[i]) {
			i++
		}
		kw.key, kw.keyEnd = s[kw.start:i], i
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		if i >= len(s) || s[i] != '=' {
			fn(kw)
			continue
		}
		i++
		for i < len(s) && isSpace(s[i]) {
			i++
		}
		kw.valStart, kw.hasValue = i, true
		if i < len(s) && s[i] == '\'' {
			i++
			for i < len(s) && s[i] != '\'' {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i+1, len(s)) // past the closing quote; an unterminated one runs to the end
		} else {
			for i < len(s) && !isSpace(s[i]) {
				if s[i] == '\\' {
					i++
				}
				i++
			}
			i = min(i, len(s))
		}
		kw.valEnd = i
		fn(kw)
	}
}

// keywordSpans returns the value spans of password= and sslpassword= in a
// key=value DSN (tokenized by scanKeywords), and the words without '=' that
// may be a password typed without its key.
func keywordSpans(s string) [][2]int {
	var spans [][2]int
	scanKeywords(s, func(kw keyword) {
		switch {
		case !kw.hasValue:
			// A word without '=' makes the DSN invalid, and may be a
			// password typed without its key ("password s3cret"). Words
			// that look like URLs are masked more finely by wordSpans.
			if !strings.Contains(kw.key, "@") && !strings.Contains(kw.key, "://") {
				spans = append(spans, [2]int{kw.start, kw.keyEnd})
			}
		case isPasswordKey(kw.key):
			spans = append(spans, [2]int{kw.valStart, kw.valEnd})
		}
	})
	return spans
}

// applySpans masks the union of spans in s and returns the masked string
// and the secrets: each masked text, and its unquoted and URL-decoded forms.
func applySpans(s string, spans [][2]int) (string, []string) {
	slices.SortFunc(spans, func(a, b [2]int) int { return cmp.Compare(a[0], b[0]) })
	var (
		b       strings.Builder
		secrets []string
		last    int
	)
	for i := 0; i < len(spans); {
		start, end := spans[i][0], spans[i][1]
		for i++; i < len(spans) && spans[i][0] <= end; i++ {
			end = max(end, spans[i][1])
		}
		start = max(start, last)
		if start >= end {
			continue
		}
		b.WriteString(s[last:start])
		b.WriteString(redactMask)
		secrets = append(secrets, secretForms(s[start:end])...)
		last = end
	}
	b.WriteString(s[last:])
	return b.String(), secrets
}

// secretForms returns raw and the forms a parser would decode it to, any
// of which may appear in an error message.
func secretForms(raw string) []string {
	forms := []string{raw}
	add := func(f string) {
		if f != "" && !slices.Contains(forms, f) {
			forms = append(forms, f)
		}
	}
	unq := strings.TrimSuffix(strings.TrimPrefix(raw, "'"), "'")
	add(unq)
	add(unescapeBackslashes(unq))
	if d, err := url.PathUnescape(raw); err == nil {
		add(d)
	}
	if d, err := url.QueryUnescape(raw); err == nil {
		add(d)
	}
	return forms
}

func unescapeBackslashes(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+1 < len(s) {
			i++
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// withoutReplication returns dsn without its replication parameter, if it
// has one. walbox and slotctl open ordinary sessions with the DSN (checks,
// slot setup), where replication=database would start a walsender session
// that refuses their queries, and the pipeline sets replication=database
// itself; so a DSN written for a replication tool works unchanged.
//
// Only the parameter is removed, as text, so that everything else (and the
// password's escaping) stays as written. The result is used only if it
// parses to the same connection settings as dsn minus that parameter;
// otherwise dsn is returned unchanged (and a malformed one is reported by
// checkDSN).
func withoutReplication(dsn string) string {
	orig, err := pgconn.ParseConfig(dsn)
	if err != nil {
		return dsn
	}
	if _, ok := orig.RuntimeParams["replication"]; !ok {
		return dsn
	}
	var out string
	trimmed := strings.TrimLeft(dsn, asciiSpaces)
	if _, ok := urlPrefix(trimmed); ok {
		out = urlWithoutParam(dsn, "replication")
	} else {
		out = keywordsWithoutParam(dsn, "replication")
	}
	got, err := pgconn.ParseConfig(out)
	if err != nil {
		return dsn
	}
	if _, ok := got.RuntimeParams["replication"]; ok {
		return dsn
	}
	delete(orig.RuntimeParams, "replication")
	if got.Host != orig.Host || got.Port != orig.Port || got.Database != orig.Database ||
		got.User != orig.User || got.Password != orig.Password || !maps.Equal(got.RuntimeParams, orig.RuntimeParams) ||
		(got.TLSConfig == nil) != (orig.TLSConfig == nil) || len(got.Fallbacks) != len(orig.Fallbacks) {
		return dsn
	}
	return out
}

// urlWithoutParam removes every key=value pair of the query whose key is
// key.
func urlWithoutParam(dsn, key string) string {
	q := strings.IndexByte(dsn, '?')
	if q < 0 {
		return dsn
	}
	var kept []string
	for pair := range strings.SplitSeq(dsn[q+1:], "&") {
		k, _, _ := strings.Cut(pair, "=")
		if uk, err := url.QueryUnescape(k); err == nil && uk == key {
			continue
		}
		kept = append(kept, pair)
	}
	if len(kept) == 0 {
		return dsn[:q]
	}
	return dsn[:q+1] + strings.Join(kept, "&")
}

// keywordsWithoutParam removes key = value from a key=value DSN, tokenized
// by scanKeywords.
func keywordsWithoutParam(s, key string) string {
	var b strings.Builder
	last := 0
	scanKeywords(s, func(kw keyword) {
		if kw.hasValue && kw.key == key {
			b.WriteString(s[last:kw.start])
			last = kw.valEnd
		}
	})
	b.WriteString(s[last:])
	return strings.TrimSpace(b.String())
}

// ConnConfig parses PGDSN for an ordinary (non-replication) session, as
// slotctl and walbox's slot setup open: a replication parameter is dropped.
// Its error names --pg-dsn and never shows the password.
func (c Config) ConnConfig() (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(c.PGDSN)
	if err != nil {
		o := optionByFlag("pg-dsn")
		return nil, o.errorFor(c.PGDSN, badf("%s", dsnParseReason(c.PGDSN, err)), "")
	}
	delete(cc.RuntimeParams, "replication")
	return cc, nil
}
