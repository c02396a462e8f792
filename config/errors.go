package config

import (
	"errors"
	"fmt"
)

// ErrInvalid is wrapped by every error Load and Validate return because of
// the user's settings: a malformed value, a value out of range, an unknown
// YAML key, a missing config file. Test it with errors.Is; the one error Load
// returns that does not wrap it is flag.ErrHelp.
var ErrInvalid = errors.New("invalid configuration")

// OptionError is one problem with one option. Load and Validate return a set
// of them joined with errors.Join; use errors.As to reach the first one.
type OptionError struct {
	// Flag is the option's flag name without dashes, e.g. "status-interval".
	Flag string
	// Env is the option's environment variable, e.g. "WALBOX_STATUS_INTERVAL".
	Env string
	// Value is the offending value as given. Secrets in it (the password of
	// --pg-dsn) are already replaced by "xxxxx".
	Value string
	// Missing is true when the option is required and was not set; Value is
	// then empty.
	Missing bool
	// Reason says what is accepted, e.g. "expected a Go duration such as 1s
	// or 500ms".
	Reason string
	// Where is the source of Value when Load knows it: "FILE:LINE" for a
	// YAML key or "environment"; empty for flags and for Validate.
	Where string
	// Key is the option's YAML key when Value came from the file, else "".
	Key string
}

// Error formats the problem as
//
//	[WHERE: ][KEY: ]invalid value "abc" for --flag (ENV): REASON
//	[WHERE: ][KEY: ]missing --flag (ENV): REASON
func (e *OptionError) Error() string {
	prefix := ""
	if e.Where != "" {
		prefix = e.Where + ": "
	}
	if e.Key != "" {
		prefix += e.Key + ": "
	}
	if e.Missing {
		return fmt.Sprintf("%smissing --%s (%s): %s", prefix, e.Flag, e.Env, e.Reason)
	}
	return fmt.Sprintf("%sinvalid value %q for --%s (%s): %s", prefix, e.Value, e.Flag, e.Env, e.Reason)
}

// Unwrap returns ErrInvalid.
func (e *OptionError) Unwrap() error { return ErrInvalid }

// problem is a configuration error that is not about one option's value: an
// unknown YAML key, an unreadable file, a flag the FlagSet does not know.
type problem struct {
	msg   string
	cause error // optional, e.g. the *fs.PathError of a missing file
}

func problemf(cause error, format string, args ...any) *problem {
	return &problem{msg: fmt.Sprintf(format, args...), cause: cause}
}

func (p *problem) Error() string { return p.msg }

// Unwrap lets errors.Is find both ErrInvalid and the cause (fs.ErrNotExist
// for a missing config file).
func (p *problem) Unwrap() []error {
	if p.cause == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, p.cause}
}
