package schemareg

import (
	"errors"
	"strconv"
	"strings"

	"github.com/twmb/franz-go/pkg/sr"
)

// Sentinel errors; test for them with errors.Is.
var (
	// ErrInvalidPayload means a payload does not fit the schema; it is
	// wrapped in a *PayloadError. It is never retryable: the same row
	// replays the same payload. The router applies its invalid-row policy.
	ErrInvalidPayload = errors.New("payload does not fit the schema")

	// ErrRegistryUnavailable means the registry could not be reached, timed
	// out or answered 5xx or 429 for longer than the retry budget. It is
	// transient: the same request may succeed later.
	ErrRegistryUnavailable = errors.New("schema registry unavailable")

	// ErrRegistryRefused means the registry answered, and the answer will
	// not change by asking again: authentication refused (401/403), the
	// subject, version or id does not exist or was deleted, or the schema
	// is not of the configured format or does not compile. It is wrapped in
	// a *RegistryError naming the subject, the version and the fix.
	ErrRegistryRefused = errors.New("schema registry refused the request")

	// ErrInvalidConfig means Config.Validate rejected the configuration.
	ErrInvalidConfig = errors.New("invalid schema registry configuration")
)

// PayloadError is a payload that does not fit its schema. It unwraps to
// ErrInvalidPayload.
type PayloadError struct {
	// Subject and Version name the schema, ID its registry id.
	Subject string
	Version int
	ID      int
	// Path is the field path at fault, "$" for the whole value,
	// "$.order.lines[2].sku" below it.
	Path string
	// Problem says what is wrong there.
	Problem string
}

// Error names the schema, the field path and the problem.
func (e *PayloadError) Error() string {
	return "payload does not fit schema " + schemaName(e.Subject, e.Version, e.ID) + " at " + e.Path + ": " + e.Problem
}

// Unwrap returns ErrInvalidPayload.
func (e *PayloadError) Unwrap() error { return ErrInvalidPayload }

// InvalidPayload reports true: the router applies its invalid-row policy
// to such an error (router.InvalidPayload).
func (e *PayloadError) InvalidPayload() bool { return true }

// RegistryError is a registry request that failed. It unwraps to
// ErrRegistryUnavailable or ErrRegistryRefused, and to the underlying error
// (an *sr.ResponseError, a net error).
type RegistryError struct {
	// Op is what was asked, e.g. "get the latest version".
	Op string
	// Subject and Version (-1 for latest, 0 when by id) or ID name what
	// was asked for.
	Subject string
	Version int
	ID      int
	// Status is the HTTP status code, 0 when there was no answer.
	Status int
	// Transient tells ErrRegistryUnavailable from ErrRegistryRefused.
	Transient bool
	// Fix says what to do.
	Fix string
	// Err is the cause.
	Err error
}

// Error names the request, the subject and version, the cause and the fix.
func (e *RegistryError) Error() string {
	var b strings.Builder
	b.WriteString("schema registry: ")
	b.WriteString(e.Op)
	b.WriteString(" for ")
	b.WriteString(schemaName(e.Subject, e.Version, e.ID))
	if e.Status != 0 {
		b.WriteString(": HTTP ")
		b.WriteString(strconv.Itoa(e.Status))
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	if e.Fix != "" {
		b.WriteString("; ")
		b.WriteString(e.Fix)
	}
	return b.String()
}

// Unwrap returns the class sentinel and the cause, so that a caller that
// classifies errors by the network errors they wrap (pipeline.IsRetryable:
// a net.Error means reconnect and try again) classifies registry faults
// alike:
//   - a transient fault unwraps to ErrRegistryUnavailable, its cause, and a
//     net.Error reporting Temporary, even when the cause is an HTTP 503;
//   - a refusal unwraps to ErrRegistryRefused and, when the registry
//     answered, its *sr.ResponseError, but never to a net.Error: a
//     certificate that does not verify arrives wrapped in a *url.Error,
//     which is a net.Error, and retrying it would never end.
func (e *RegistryError) Unwrap() []error {
	if e.Transient {
		return []error{ErrRegistryUnavailable, e.Err, transientFault{}}
	}
	var resp *sr.ResponseError
	if errors.As(e.Err, &resp) {
		return []error{ErrRegistryRefused, resp}
	}
	return []error{ErrRegistryRefused}
}

// transientFault marks a transient registry fault as a net.Error.
type transientFault struct{}

func (transientFault) Error() string   { return "transient schema registry fault" }
func (transientFault) Timeout() bool   { return false }
func (transientFault) Temporary() bool { return true }

// schemaName is `subject "orders-value" version 3 (id 7)`, with the parts known.
func schemaName(subject string, version, id int) string {
	var parts []string
	if subject != "" {
		parts = append(parts, "subject "+strconv.Quote(subject))
	}
	switch {
	case version > 0:
		parts = append(parts, "version "+strconv.Itoa(version))
	case version < 0:
		parts = append(parts, "at its latest version")
	}
	if id > 0 {
		if len(parts) == 0 {
			parts = append(parts, "id "+strconv.Itoa(id))
		} else {
			parts = append(parts, "(id "+strconv.Itoa(id)+")")
		}
	}
	if len(parts) == 0 {
		return "<unnamed schema>"
	}
	return strings.Join(parts, " ")
}
