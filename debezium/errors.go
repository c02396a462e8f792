package debezium

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnsupported marks a configuration with keys walbox cannot honour.
var ErrUnsupported = errors.New("debezium: unsupported configuration")

// Problem is one key walbox cannot honour, or one that is missing.
type Problem struct {
	Key   string
	Where string // FILE:LINE or FILE
	Value string // redacted
	// Why says what walbox does not do; Fix what to do instead.
	Why, Fix string
}

func (p Problem) String() string {
	var b strings.Builder
	b.WriteString(p.Key)
	if p.Value != "" {
		fmt.Fprintf(&b, "=%s", p.Value)
	}
	if p.Where != "" {
		fmt.Fprintf(&b, " (%s)", p.Where)
	}
	fmt.Fprintf(&b, ": %s", p.Why)
	if p.Fix != "" {
		fmt.Fprintf(&b, "; %s", p.Fix)
	}
	return b.String()
}

// UnsupportedError lists every key of a Debezium configuration that walbox
// cannot honour, all at once. It matches ErrUnsupported.
type UnsupportedError struct {
	Problems []Problem
}

func (e *UnsupportedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "debezium: %d setting(s) of the Debezium configuration cannot be honoured by walbox (fix them all, then start again):", len(e.Problems))
	for _, p := range e.Problems {
		b.WriteString("\n  - ")
		b.WriteString(p.String())
	}
	return b.String()
}

func (e *UnsupportedError) Unwrap() error { return ErrUnsupported }
