package kafkasec

import (
	"errors"
	"fmt"
)

// ErrInvalid marks a security setting that cannot be used; the error text
// names the option and the fix, never a secret.
var ErrInvalid = errors.New("invalid Kafka security setting")

// invalid is a problem with a setting: its text alone is the message (the
// caller adds the option when it has more context), and it matches
// ErrInvalid and its cause with errors.Is.
type invalid struct {
	msg   string
	cause error
}

func invalidf(cause error, format string, args ...any) error {
	return &invalid{msg: fmt.Sprintf(format, args...), cause: cause}
}

func (e *invalid) Error() string { return e.msg }

func (e *invalid) Unwrap() []error {
	if e.cause == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.cause}
}
