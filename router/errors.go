package router

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
)

// Sentinel errors; test for them with errors.Is.
var (
	// ErrInvalidRow means an outbox row cannot become a Kafka record: a
	// required column is NULL or missing, the headers are not a JSON object,
	// or the topic it routes to is not a name Kafka accepts. Route returns it
	// wrapped in an *InvalidRowError, and only under PolicyFail; under
	// PolicyDeadLetter the row goes to the dead-letter topic instead. It is
	// never retryable: the same WAL replays the same row.
	ErrInvalidRow = errors.New("invalid outbox row")

	// ErrInvalidConfig means Config.Validate (or New) rejected the
	// configuration, each problem as a *ConfigError naming the field and the
	// fix, or CheckColumns found the table lacks a configured column.
	ErrInvalidConfig = errors.New("invalid router configuration")
)

// InvalidRowError describes an outbox row that cannot be routed. It unwraps to
// ErrInvalidRow.
type InvalidRowError struct {
	// EventID is the row's id column as text, "" when the table has no id
	// column or it is NULL.
	EventID string
	// LSN is the WAL position of the message that carried the row.
	LSN pglogrepl.LSN
	// XID is the writing transaction's id.
	XID uint32
	// Table is the qualified table name, "schema.table".
	Table string
	// Column is the configured column (or column->>key) at fault.
	Column string
	// Reason says what is wrong with the row.
	Reason string
}

// Error names the row, its WAL position, the column at fault and what to do.
func (e *InvalidRowError) Error() string {
	id := e.EventID
	if id == "" {
		id = "<none>"
	} else {
		id = strconv.Quote(id)
	}
	msg := "router: invalid outbox row id " + id + " in " + e.Table +
		" at LSN " + e.LSN.String() + " (xid " + strconv.FormatUint(uint64(e.XID), 10) + ")"
	if e.Column != "" {
		msg += ", column " + strconv.Quote(e.Column)
	}
	return msg + ": " + e.Reason +
		"; fix the writer, or set invalid_rows: dead-letter to route such rows to a dead-letter topic"
}

// Unwrap returns ErrInvalidRow.
func (e *InvalidRowError) Unwrap() error { return ErrInvalidRow }

// Field names a Config field, as written in Go ("Columns.AggregateID"). A
// *ConfigError carries the Field at fault, so that a caller that exposes the
// Config under other names (walbox's flags, environment variables and YAML
// keys) can report the problem under the name its user typed.
type Field string

// The fields of Config, as ConfigError.Field reports them.
const (
	FieldColumnsID            Field = "Columns.ID"
	FieldColumnsAggregateType Field = "Columns.AggregateType"
	FieldColumnsAggregateID   Field = "Columns.AggregateID"
	FieldColumnsEventType     Field = "Columns.EventType"
	FieldColumnsPayload       Field = "Columns.Payload"
	FieldColumnsHeaders       Field = "Columns.Headers"
	FieldColumnsTopic         Field = "Columns.Topic"
	FieldTopicTemplate        Field = "TopicTemplate"
	FieldInvalidRows          Field = "InvalidRows"
	FieldDeadLetterTopic      Field = "DeadLetterTopic"
	FieldCloudEventsMode      Field = "CloudEvents.Mode"
)

// ConfigError is one problem with one Config field; Config.Validate and New
// return one or several (joined with errors.Join). It unwraps to
// ErrInvalidConfig.
type ConfigError struct {
	// Field is the field at fault.
	Field Field
	// Value is the field's value after defaults ("" when Missing).
	Value string
	// Missing is true when the field is required (by another field's
	// value) and empty.
	Missing bool

	// The reason is kept as a format and its arguments so that Reason can
	// write the other fields it mentions under the caller's names.
	format string
	args   []any
}

func configErrorf(field Field, value, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, Value: value, format: format, args: args}
}

// Reason says what is wrong and what is accepted, without the field's own
// name and value. Other fields it mentions are written with name, or as
// their Go names when name is nil.
func (e *ConfigError) Reason(name func(Field) string) string {
	args := make([]any, len(e.args))
	for i, a := range e.args {
		if f, ok := a.(Field); ok && name != nil {
			a = name(f)
		}
		args[i] = a
	}
	return fmt.Sprintf(e.format, args...)
}

// Error formats the problem as `router: Field "value": reason`, or
// `router: Field: reason` when the field is missing.
func (e *ConfigError) Error() string {
	if e.Missing {
		return "router: " + string(e.Field) + ": " + e.Reason(nil)
	}
	return "router: " + string(e.Field) + " " + strconv.Quote(e.Value) + ": " + e.Reason(nil)
}

// Unwrap returns ErrInvalidConfig.
func (e *ConfigError) Unwrap() error { return ErrInvalidConfig }
