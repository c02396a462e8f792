package router

import (
	"errors"
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
	// configuration. The wrapped message names the field and the fix.
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

// configError wraps ErrInvalidConfig with a detail.
func configError(detail string) error {
	return &wrapped{sentinel: ErrInvalidConfig, msg: "router: " + detail}
}

// wrapped is an error with a fixed message that unwraps to a sentinel. It
// exists so config errors read "router: <detail>" without the sentinel's own
// text repeated in the middle.
type wrapped struct {
	sentinel error
	msg      string
}

func (e *wrapped) Error() string { return e.msg }
func (e *wrapped) Unwrap() error { return e.sentinel }
