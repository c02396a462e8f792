package retention

import "errors"

// Sentinel errors; returned errors wrap one with the values and the fix.
var (
	// ErrInvalidConfig: the window is negative, or the trailing slot's name
	// is malformed or the live slot's own.
	ErrInvalidConfig = errors.New("retention: invalid configuration")
	// ErrSlotMismatch: a slot of the trailing slot's name exists but is not
	// a persistent pgoutput slot of this database, so walbox will not
	// touch it.
	ErrSlotMismatch = errors.New("retention: trailing slot does not match")
	// ErrLiveSlotMissing: the live slot does not exist, so there is nothing
	// to trail (walbox run reports the live slot itself).
	ErrLiveSlotMissing = errors.New("retention: live slot not found")
)
