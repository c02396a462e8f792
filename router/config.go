package router

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Columns names the outbox table's columns. An empty field takes its default
// (see DefaultColumns), except Topic, which stays unset unless given.
//
// ID, AggregateID, AggregateType, EventType and Topic may also name a
// top-level key of a JSON object column with Postgres's text-extraction
// operator, "column->>key" (for example "metadata->>Aggregate-Id" for
// watermill-sql tables, which keep everything but the payload in a metadata
// column). The key is taken literally: no quoting, no nested paths. Payload
// and Headers must be plain column names. A column name is written as stored
// in the catalog: unquoted, case-sensitive, at most 63 bytes.
//
// ID, EventType and Headers are optional per table: a table without them (or a
// row with them NULL) simply gets no event_id, event_type or row headers.
// AggregateID and Payload are required in every row.
type Columns struct {
	// ID is the event id, sent as the event_id header. Default "id".
	ID string
	// AggregateType is the aggregate's type; the default topic template
	// routes by it. Default "aggregate_type".
	AggregateType string
	// AggregateID is the record key: every event of one aggregate lands on
	// one partition, which is what keeps them in order. Default
	// "aggregate_id".
	AggregateID string
	// EventType is sent as the event_type header. Default "event_type".
	EventType string
	// Payload is the record value. Default "payload".
	Payload string
	// Headers is a JSON object column; each top-level key becomes a record
	// header. Default "headers".
	Headers string
	// Topic, when set, names a column holding each row's topic; it wins over
	// Config.TopicTemplate. Default unset.
	Topic string
}

// DefaultColumns returns the column names of the classic outbox table:
// id, aggregate_type, aggregate_id, event_type, payload, headers; no topic
// column.
func DefaultColumns() Columns {
	return Columns{
		ID:            "id",
		AggregateType: "aggregate_type",
		AggregateID:   "aggregate_id",
		EventType:     "event_type",
		Payload:       "payload",
		Headers:       "headers",
	}
}

func (c Columns) withDefaults() Columns {
	d := DefaultColumns()
	set := func(v *string, def string) {
		if *v == "" {
			*v = def
		}
	}
	set(&c.ID, d.ID)
	set(&c.AggregateType, d.AggregateType)
	set(&c.AggregateID, d.AggregateID)
	set(&c.EventType, d.EventType)
	set(&c.Payload, d.Payload)
	set(&c.Headers, d.Headers)
	return c
}

// logicalField is one outbox role: its placeholder name in a topic template,
// its Config field, and whether it must be a plain column.
type logicalField struct {
	name  string
	field Field
	get   func(*Columns) string
	plain bool
}

// logicalFields are the names a topic template placeholder may use for the
// roles, whatever columns they are mapped to.
var logicalFields = []logicalField{
	{"id", FieldColumnsID, func(c *Columns) string { return c.ID }, false},
	{"aggregate_type", FieldColumnsAggregateType, func(c *Columns) string { return c.AggregateType }, false},
	{"aggregate_id", FieldColumnsAggregateID, func(c *Columns) string { return c.AggregateID }, false},
	{"event_type", FieldColumnsEventType, func(c *Columns) string { return c.EventType }, false},
	{"payload", FieldColumnsPayload, func(c *Columns) string { return c.Payload }, true},
	{"headers", FieldColumnsHeaders, func(c *Columns) string { return c.Headers }, true},
	{"topic", FieldColumnsTopic, func(c *Columns) string { return c.Topic }, false},
}

// Policy says what Route does with a row it cannot turn into a record.
type Policy string

const (
	// PolicyFail makes Route return an *InvalidRowError. The pipeline then
	// stops before confirming the row's LSN, so nothing is lost and the row
	// is met again after the writer is fixed or the policy changed. Default.
	PolicyFail Policy = "fail"
	// PolicyDeadLetter routes the row, with whatever could be computed and
	// walbox_* headers saying why, to Config.DeadLetterTopic.
	PolicyDeadLetter Policy = "dead-letter"
)

// ParsePolicy parses "fail" or "dead-letter". The empty string is PolicyFail.
// The error is a *ConfigError for FieldInvalidRows.
func ParsePolicy(s string) (Policy, error) {
	switch Policy(s) {
	case "", PolicyFail:
		return PolicyFail, nil
	case PolicyDeadLetter:
		return PolicyDeadLetter, nil
	}
	return "", configErrorf(FieldInvalidRows, s, "unknown policy; expected %q or %q", PolicyFail, PolicyDeadLetter)
}

// DefaultTopicTemplate is the topic template used when Config.TopicTemplate is
// empty and no topic column is set. Its {aggregate_type} is the logical field,
// so it follows Columns.AggregateType wherever that is mapped. It matches
// Debezium's outbox event router default, so consumers moving from Debezium
// keep their topics.
const DefaultTopicTemplate = "outbox.event.{aggregate_type}"

// Config configures a Router. The zero value is usable: classic column names,
// DefaultTopicTemplate, PolicyFail.
type Config struct {
	// Columns names the outbox columns; empty fields take their defaults.
	Columns Columns
	// TopicTemplate renders each row's topic when Columns.Topic is unset:
	// literal text with placeholders in braces, e.g.
	// "orders.{aggregate_type}.v1". Literal text must be valid in a Kafka
	// topic name ([a-zA-Z0-9._-]); braces cannot be escaped, as Kafka forbids
	// them in topic names anyway. Default DefaultTopicTemplate.
	//
	// A placeholder names a logical field or a column:
	//   - id, aggregate_type, aggregate_id, event_type, payload, headers and
	//     topic stand for the column Columns maps that field to (after
	//     defaults), so with AggregateType "aggregatetype",
	//     {aggregate_type} reads column aggregatetype. A logical name wins
	//     over a column of the same name: if the table also has a column
	//     literally named aggregate_type while AggregateType maps elsewhere,
	//     {aggregate_type} still reads the mapped column. {topic} is the
	//     column named topic while Columns.Topic is unset.
	//   - any other name is a column of the table, and "column->>key" a
	//     top-level key of a JSON object column (always a column, never a
	//     logical field).
	//
	// Ignored when Columns.Topic is set (but still validated if given).
	TopicTemplate string
	// InvalidRows is the policy for rows that cannot be routed. Default
	// PolicyFail.
	InvalidRows Policy
	// DeadLetterTopic receives invalid rows under PolicyDeadLetter; required
	// then, and rejected with PolicyFail (where it would silently do nothing).
	DeadLetterTopic string
	// Values, when set, encodes each routed payload into the record value
	// (see ValueEncoder); nil sends the payload as it is. A dead-lettered
	// row carries the payload as it is.
	Values ValueEncoder
	// Keys, when set, encodes each routed key (the aggregate id's text)
	// into the record key, as Values does values; nil sends the text. A
	// dead-lettered row carries the key as it is.
	Keys ValueEncoder
	// CloudEvents, when its Mode is set, sends each record as a CloudEvent
	// (cloudevents.go).
	CloudEvents CloudEvents
}

// withDefaults fills every defaulted field.
func (c Config) withDefaults() Config {
	c.Columns = c.Columns.withDefaults()
	if c.InvalidRows == "" {
		c.InvalidRows = PolicyFail
	}
	if c.TopicTemplate == "" && c.Columns.Topic == "" {
		c.TopicTemplate = DefaultTopicTemplate
	}
	return c
}

// Validate reports whether the configuration is usable, with defaults
// applied: the policy is known, a dead-letter topic is given exactly when the
// policy needs one and is a valid Kafka topic name, the column names parse,
// and the topic template compiles. It reports every problem at once, each a
// *ConfigError naming its Field, joined with errors.Join; all unwrap to
// ErrInvalidConfig.
func (c Config) Validate() error {
	_, _, err := c.compile()
	return err
}

// compile validates c and returns it with defaults applied, plus the compiled
// template (nil when a topic column is configured).
func (c Config) compile() (Config, *template, error) {
	c = c.withDefaults()
	var errs []error
	policy, err := ParsePolicy(string(c.InvalidRows))
	if err != nil {
		errs = append(errs, err)
	}
	switch {
	case policy == PolicyDeadLetter && c.DeadLetterTopic == "":
		e := configErrorf(FieldDeadLetterTopic, "", "required with %s %q: set it to the topic that receives rows that cannot be routed",
			FieldInvalidRows, PolicyDeadLetter)
		e.Missing = true
		errs = append(errs, e)
	case policy == PolicyDeadLetter:
		if why := topicProblem(c.DeadLetterTopic); why != "" {
			errs = append(errs, configErrorf(FieldDeadLetterTopic, c.DeadLetterTopic, "%s", why))
		}
	case err == nil && c.DeadLetterTopic != "":
		errs = append(errs, configErrorf(FieldDeadLetterTopic, c.DeadLetterTopic,
			"set, but %s is %q, under which invalid rows stop walbox, so it would never be used; set %s to %q or remove it",
			FieldInvalidRows, policy, FieldInvalidRows, PolicyDeadLetter))
	}
	switch c.CloudEvents.Mode {
	case CloudEventsOff, CloudEventsBinary, CloudEventsStructured:
	default:
		errs = append(errs, configErrorf(FieldCloudEventsMode, string(c.CloudEvents.Mode), "neither %q nor %q", CloudEventsBinary, CloudEventsStructured))
	}
	for _, lf := range logicalFields {
		name := lf.get(&c.Columns)
		if name == "" {
			continue // only Topic may be empty after defaults
		}
		rf, err := parseRef(name)
		if err != nil {
			errs = append(errs, configErrorf(lf.field, name, "%v", err))
			continue
		}
		if lf.plain && rf.json {
			errs = append(errs, configErrorf(lf.field, name, "must be a plain column name, not a ->> extraction"))
		}
	}
	var t *template
	if c.TopicTemplate != "" {
		// A template given alongside a topic column is still checked: it is
		// unused, but a typo in it should not wait for the column to be removed.
		t, err = compileTemplate(c.TopicTemplate, &c.Columns)
		if err != nil {
			errs = append(errs, configErrorf(FieldTopicTemplate, c.TopicTemplate, "%v", err))
		}
	}
	if len(errs) > 0 {
		return c, nil, errors.Join(errs...)
	}
	if c.Columns.Topic != "" {
		return c, nil, nil
	}
	return c, t, nil
}

// ref is a parsed column setting: a column, optionally with a top-level JSON
// key to extract from it.
type ref struct {
	spec   string // as configured, for messages
	column string
	key    string
	json   bool // column->>key
}

const jsonArrow = "->>"

// maxIdentLen is NAMEDATALEN-1: Postgres truncates longer names, so a longer
// column name could never match what pgoutput sends.
const maxIdentLen = 63

func parseRef(s string) (ref, error) {
	col, key, isJSON := strings.Cut(s, jsonArrow)
	switch {
	case col == "":
		return ref{}, errors.New("empty column name")
	case isJSON && key == "":
		return ref{}, errors.New("empty key after ->>")
	case len(col) > maxIdentLen:
		return ref{}, fmt.Errorf("column name %q is %d bytes long, Postgres keeps only %d", col, len(col), maxIdentLen)
	case strings.ContainsRune(col, '"'):
		return ref{}, fmt.Errorf("column name %q: write it without quotes, exactly as stored; names are case-sensitive here", col)
	}
	for _, r := range s {
		if unicode.IsControl(r) {
			return ref{}, fmt.Errorf("it contains the control character %q", r)
		}
	}
	return ref{spec: s, column: col, key: key, json: isJSON}, nil
}

// template is a compiled topic template: literal and placeholder segments in
// order. Compiling once means Route only appends bytes.
type template struct {
	segs    []segment
	refs    []ref    // placeholders resolved to columns, indexed by segment.ref
	names   []string // placeholders as written, parallel to refs
	logical []Field  // the logical field a placeholder names, "" for a column
	columns string   // placeholder names joined by ", ", for errors about the rendered topic
}

// segment is a literal (ref < 0) or a placeholder (index into template.refs).
type segment struct {
	lit string
	ref int
}

// compileTemplate parses s and resolves its placeholders against cols (with
// defaults applied): a logical field name stands for its mapped column, any
// other name is a column (see Config.TopicTemplate). Only compile calls it:
// a malformed mapped column is left to compile's check of Columns.
func compileTemplate(s string, cols *Columns) (*template, error) {
	if s == "" {
		return nil, fmt.Errorf("empty template")
	}
	t := &template{}
	for i := 0; i < len(s); {
		switch s[i] {
		case '{':
			end := strings.IndexAny(s[i+1:], "{}")
			if end < 0 || s[i+1+end] == '{' {
				return nil, fmt.Errorf("unclosed { at offset %d", i)
			}
			name := s[i+1 : i+1+end]
			if name == "" {
				return nil, fmt.Errorf("empty placeholder {} at offset %d", i)
			}
			spec, field := name, Field("")
			for _, lf := range logicalFields {
				if lf.name == name {
					if mapped := lf.get(cols); mapped != "" {
						spec, field = mapped, lf.field
					}
					break
				}
			}
			rf, err := parseRef(spec)
			switch {
			case err != nil && field != "":
				// The mapped column is malformed: compile reports it under
				// the Columns field; once is enough.
				rf = ref{spec: spec}
			case err != nil:
				return nil, fmt.Errorf("placeholder {%s} at offset %d: %v", name, i, err)
			}
			t.segs = append(t.segs, segment{ref: len(t.refs)})
			t.refs = append(t.refs, rf)
			t.names = append(t.names, name)
			t.logical = append(t.logical, field)
			if t.columns != "" {
				t.columns += ", "
			}
			t.columns += name
			i += end + 2
		case '}':
			return nil, fmt.Errorf("unmatched } at offset %d", i)
		default:
			end := strings.IndexAny(s[i:], "{}")
			if end < 0 {
				end = len(s) - i
			}
			lit := s[i : i+end]
			for j := 0; j < len(lit); j++ {
				if !topicByte(lit[j]) {
					return nil, fmt.Errorf("literal character %q at offset %d is not allowed in a Kafka topic name "+
						"(only a-z A-Z 0-9 . _ -)", lit[j:j+1], i+j)
				}
			}
			t.segs = append(t.segs, segment{lit: lit, ref: -1})
			i += end
		}
	}
	if len(t.refs) == 0 {
		if why := topicProblem(s); why != "" {
			return nil, fmt.Errorf("%s", why)
		}
	} else if n := t.literalLen(); n > maxTopicLen {
		return nil, fmt.Errorf("literal text alone is %d characters, over Kafka's %d-character topic limit", n, maxTopicLen)
	}
	return t, nil
}

func (t *template) literalLen() int {
	n := 0
	for _, s := range t.segs {
		n += len(s.lit)
	}
	return n
}

// maxTopicLen is Kafka's topic name limit (kafka.common.internals.Topic).
const maxTopicLen = 249

func topicByte(b byte) bool {
	return 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || '0' <= b && b <= '9' || b == '.' || b == '_' || b == '-'
}

// topicProblem returns why Kafka would reject name as a topic, or "".
// Kafka's rule: 1 to 249 characters of [a-zA-Z0-9._-], and not "." or "..".
func topicProblem[T string | []byte](name T) string {
	switch {
	case len(name) == 0:
		return "topic name is empty"
	case len(name) > maxTopicLen:
		return "topic name is " + strconv.Itoa(len(name)) + " characters, over Kafka's limit of 249"
	case string(name) == "." || string(name) == "..":
		return `topic name cannot be "." or ".."`
	}
	for i := 0; i < len(name); i++ {
		if !topicByte(name[i]) {
			return "topic name contains " + strconv.Quote(string(name[i:i+1])) +
				" at offset " + strconv.Itoa(i) + "; Kafka allows only a-z A-Z 0-9 . _ -"
		}
	}
	return ""
}
