package inbox

import "errors"

// Sentinel errors; returned errors wrap one of them with the values involved
// and the fix.
var (
	// ErrInvalidConfig: a Config field is invalid; the message names it.
	ErrInvalidConfig = errors.New("inbox: invalid configuration")

	// ErrMissingEventID: the record has no event id header, an empty one, or
	// several that disagree. The message names the header and the record's
	// topic, partition and offset. Such a record cannot be deduplicated;
	// Handle and Process refuse it without calling the handler.
	ErrMissingEventID = errors.New("inbox: record has no usable event id")
)
