package inbox

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Sentinel errors; returned errors wrap one of them with the values involved
// and the fix.
var (
	// ErrInvalidConfig: a Config field is invalid; the message names it.
	ErrInvalidConfig = errors.New("inbox: invalid configuration")

	// ErrMissingEventID: the record has no event id header, an empty one,
	// several that disagree, or one that is not text (a NUL byte, invalid
	// UTF-8). The message names the header and the record's
	// topic, partition and offset. Such a record cannot be deduplicated;
	// Handle and Process refuse it without calling the handler.
	ErrMissingEventID = errors.New("inbox: record has no usable event id")
)

// HandlerError is the error of HandleBatch (and Handle, Process,
// ProcessBatch) when the handler failed for one record. The transaction it
// ran in was aborted: roll it back and deliver the batch again, or, to get
// past a record that can never succeed, deal with Record on its own and
// process the others without it.
type HandlerError struct {
	Index   int         // Record's index in the batch
	Record  *kgo.Record // the record whose handler failed
	EventID string      // its event id
	Source  string      // its source (Config.Source), "" by default
	Err     error       // the handler's error (a panic is not caught)

	table tableName
}

func (e *HandlerError) Error() string {
	src := ""
	if e.Source != "" {
		src = fmt.Sprintf(" of source %q", e.Source)
	}
	return fmt.Sprintf("inbox %s: event %q%s (topic=%s partition=%d offset=%d): handler: %v (the transaction is aborted: roll it back and deliver the records again)",
		e.table, e.EventID, src, e.Record.Topic, e.Record.Partition, e.Record.Offset, e.Err)
}

func (e *HandlerError) Unwrap() error { return e.Err }
