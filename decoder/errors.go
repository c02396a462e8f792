package decoder

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pglogrepl"
)

// Sentinel errors. Decode returns them wrapped in an *Error that names the
// WAL position and message type; test for them with errors.Is. None of them is
// retryable by skipping the message: an undecodable message must stop the
// pipeline before its LSN is confirmed, or the events in it are lost.
var (
	// ErrMalformed means the bytes of a message do not follow the pgoutput
	// protocol version 1 layout: truncated, a length that overruns the
	// message, an unknown tuple column kind, or trailing bytes. It points at a
	// framing bug or corruption, never at user data.
	ErrMalformed = errors.New("malformed pgoutput message")

	// ErrUnknownRelation means a change referenced a relation OID for which no
	// Relation message was seen in this walsender session. The server sends
	// one before the first change of each table per session, so this happens
	// when messages were skipped or the cache was Reset mid-session.
	ErrUnknownRelation = errors.New("change for a relation with no preceding Relation message")

	// ErrProtocol means messages arrived out of order: an Insert or a
	// transactional logical message outside a transaction, a Begin inside
	// one, a Commit without a Begin or with a different commit LSN, or a
	// tuple whose column count disagrees with its Relation message. Transaction boundaries are what walbox confirms, so it
	// refuses to guess.
	ErrProtocol = errors.New("pgoutput messages out of order")

	// ErrStreamingUnsupported means the server sent a protocol version 2
	// stream message (Stream Start, Stop, Commit or Abort) to a Decoder
	// without SetStreaming.
	ErrStreamingUnsupported = errors.New("streamed in-progress transaction to a decoder without streaming: " +
		"the session was started with proto_version 1 or streaming off, so the server must not stream " +
		"(check the START_REPLICATION plugin options)")

	// ErrUnknownMessage means the first byte of a message is not a pgoutput
	// message type walbox knows (for example a two-phase commit message, which
	// proto_version 1 without two_phase never sends).
	ErrUnknownMessage = errors.New("unknown pgoutput message type")
)

// Error is the error Decode returns. It wraps one of the sentinels above so
// errors.Is works, and records where in the WAL the bad message was.
type Error struct {
	// LSN is the WAL start of the XLogData that carried the message
	// (the walStart argument of Decode).
	LSN pglogrepl.LSN
	// Type is the message's first byte, or 0 for an empty message (the
	// detail then says "empty message").
	Type byte
	// Err wraps the sentinel together with the details.
	Err error
}

// Error names the LSN, the message type and what is wrong with it.
func (e *Error) Error() string {
	return "decoder: " + messageName(e.Type) + " message at LSN " + e.LSN.String() + ": " + e.Err.Error()
}

// Unwrap returns the wrapped error, so errors.Is(err, ErrMalformed) works.
func (e *Error) Unwrap() error { return e.Err }

// newError builds an *Error whose Err wraps sentinel with a formatted detail.
func newError(lsn pglogrepl.LSN, typ byte, sentinel error, format string, args ...any) *Error {
	return &Error{LSN: lsn, Type: typ, Err: fmt.Errorf("%w: %s", sentinel, fmt.Sprintf(format, args...))}
}

// panicError records a panic recovered inside Decode. It unwraps to
// ErrMalformed so callers treat it like any undecodable message; the fuzz
// target looks for it, because a recovered panic is a missing length check.
type panicError struct {
	value any
}

func (e *panicError) Error() string {
	return fmt.Sprintf("%v: decoder panicked (missing bounds check, please report): %v", ErrMalformed, e.value)
}

func (e *panicError) Unwrap() error { return ErrMalformed }

// messageName renders a message type byte for error messages, e.g. Insert ('I').
func messageName(t byte) string {
	var name string
	switch t {
	case msgBegin:
		name = "Begin"
	case msgCommit:
		name = "Commit"
	case msgOrigin:
		name = "Origin"
	case msgRelation:
		name = "Relation"
	case msgType:
		name = "Type"
	case msgInsert:
		name = "Insert"
	case msgUpdate:
		name = "Update"
	case msgDelete:
		name = "Delete"
	case msgTruncate:
		name = "Truncate"
	case msgMessage:
		name = "logical decoding"
	case msgStreamStart:
		name = "Stream Start"
	case msgStreamStop:
		name = "Stream Stop"
	case msgStreamCommit:
		name = "Stream Commit"
	case msgStreamAbort:
		name = "Stream Abort"
	default:
		name = "unknown"
	}
	return name + " (" + strconv.QuoteRuneToASCII(rune(t)) + ")"
}
