package eventrouter

import (
	"strings"

	"github.com/walbox/walbox/decoder"
)

// maxTopicNameLength is Kafka's limit on a topic name, to which Debezium's
// topic naming strategies cut a name.
const maxTopicNameLength = 249

// recordSchemaPrefix is the prefix of a table's record schema names as
// Debezium 3.x's Postgres connector builds it: the table's change event
// topic under its default strategy (io.debezium.schema.SchemaTopicNamingStrategy),
// that is topic.prefix, schema and table joined with topic.delimiter (blank
// parts left out), sanitized for Kafka: every character outside
// [A-Za-z0-9._-] becomes "_", and the name is cut at 249 characters.
func recordSchemaPrefix(cfg Config, rel *decoder.Relation) string {
	delim := cfg.TopicDelimiter
	if delim == "" {
		delim = "."
	}
	var parts []string
	for _, p := range []string{cfg.LogicalName, rel.Namespace, rel.Name} {
		if strings.TrimSpace(p) != "" {
			parts = append(parts, p)
		}
	}
	return sanitizeTopicName(strings.Join(parts, delim))
}

// sanitizeTopicName is Debezium's AbstractTopicNamingStrategy.sanitizedTopicName
// with its default (underscore) replacement.
func sanitizeTopicName(name string) string {
	var b strings.Builder
	b.Grow(len(name))
	for _, c := range name {
		switch {
		case c == '.' || c == '_' || c == '-', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
			b.WriteRune(c)
		case c > 0xFFFF:
			// A Java char is a UTF-16 unit: a character outside the BMP is
			// two invalid chars, so two replacements.
			b.WriteString("__")
		default:
			b.WriteByte('_')
		}
	}
	s := b.String()
	switch {
	case len(s) > maxTopicNameLength:
		s = s[:maxTopicNameLength]
	case s == ".":
		s = "_"
	case s == "..":
		s = "__"
	}
	return s
}
