package eventrouter

import (
	"fmt"
	"regexp"
	"strings"
)

// topicRouter is Kafka Connect's RegexRouter as the EventRouter configures
// it: when route.topic.regex matches the whole route-by value, the topic is
// the value with its first match replaced by route.topic.replacement, read
// with java.util.regex.Matcher's replacement syntax ($n, ${name}, \x);
// otherwise the value itself.
type topicRouter struct {
	full  *regexp.Regexp // anchored: Matcher.matches
	find  *regexp.Regexp // unanchored: Matcher.replaceFirst
	parts []replPart
	cache map[string]string
}

// replPart is a literal or a group reference of the replacement.
type replPart struct {
	lit   string
	group int // -1 for a literal
}

const maxCachedTopics = 4096

func newTopicRouter(regex, replacement string) (*topicRouter, error) {
	full, err := regexp.Compile(`^(?:` + regex + `)$`)
	if err != nil {
		return nil, fmt.Errorf("route.topic.regex %q: %w (walbox reads it with Go's RE2 syntax: "+
			"no look-around or back-references)", regex, err)
	}
	find := regexp.MustCompile(regex) // compiles since the anchored form did
	parts, err := parseReplacement(replacement, find)
	if err != nil {
		return nil, fmt.Errorf("route.topic.replacement %q: %w", replacement, err)
	}
	return &topicRouter{full: full, find: find, parts: parts, cache: make(map[string]string)}, nil
}

// parseReplacement reads Java's Matcher replacement syntax against re's
// groups: "\" quotes the next character, "${name}" is a named group and
// "$" followed by digits a numbered one, taking further digits only while
// the number stays a valid group (as Matcher.appendReplacement does).
func parseReplacement(repl string, re *regexp.Regexp) ([]replPart, error) {
	var parts []replPart
	var lit strings.Builder
	flush := func() {
		if lit.Len() > 0 {
			parts = append(parts, replPart{lit: lit.String(), group: -1})
			lit.Reset()
		}
	}
	groups := re.NumSubexp()
	for i := 0; i < len(repl); i++ {
		c := repl[i]
		switch c {
		case '\\':
			i++
			if i == len(repl) {
				return nil, fmt.Errorf("character to be escaped is missing at its end")
			}
			lit.WriteByte(repl[i])
		case '$':
			i++
			if i == len(repl) {
				return nil, fmt.Errorf("illegal group reference: group index is missing at its end")
			}
			if repl[i] == '{' {
				end := strings.IndexByte(repl[i:], '}')
				if end < 0 {
					return nil, fmt.Errorf("named capturing group is missing trailing '}'")
				}
				name := repl[i+1 : i+end]
				idx := re.SubexpIndex(name)
				if idx < 0 {
					return nil, fmt.Errorf("no group with name {%s} in route.topic.regex %q", name, re.String())
				}
				flush()
				parts = append(parts, replPart{group: idx})
				i += end
				continue
			}
			if repl[i] < '0' || repl[i] > '9' {
				return nil, fmt.Errorf("illegal group reference %q", repl[i-1:i+1])
			}
			n := int(repl[i] - '0')
			if n > groups {
				return nil, fmt.Errorf("no group %d in route.topic.regex %q", n, re.String())
			}
			for i+1 < len(repl) && repl[i+1] >= '0' && repl[i+1] <= '9' {
				next := n*10 + int(repl[i+1]-'0')
				if next > groups {
					break
				}
				n = next
				i++
			}
			flush()
			parts = append(parts, replPart{group: n})
		default:
			lit.WriteByte(c)
		}
	}
	flush()
	return parts, nil
}

// route returns the topic for a route-by value.
func (t *topicRouter) route(value string) string {
	if topic, ok := t.cache[value]; ok {
		return topic
	}
	topic := value
	if t.full.MatchString(value) {
		m := t.find.FindStringSubmatchIndex(value)
		var b strings.Builder
		b.WriteString(value[:m[0]])
		for _, p := range t.parts {
			if p.group < 0 {
				b.WriteString(p.lit)
			} else if s, e := m[2*p.group], m[2*p.group+1]; s >= 0 {
				b.WriteString(value[s:e])
			}
		}
		b.WriteString(value[m[1]:])
		topic = b.String()
	}
	if len(t.cache) >= maxCachedTopics {
		clear(t.cache)
	}
	t.cache[value] = topic
	return topic
}

// topicProblem says why Kafka would refuse name as a topic, or "".
func topicProblem(name string) string {
	switch {
	case name == "":
		return "the topic name is empty"
	case name == "." || name == "..":
		return "the topic name may not be \".\" or \"..\""
	case len(name) > 249:
		return fmt.Sprintf("the topic name is %d characters long, more than Kafka's 249", len(name))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Sprintf("the topic name %q contains %q; Kafka allows only ASCII letters, digits, '.', '_' and '-'", name, c)
		}
	}
	return ""
}
