package router

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/walbox/walbox/decoder"
)

// ValueEncoder turns a routed payload into the record value, for formats
// governed by a schema registry (package schemareg's Encoder).
//
// EncodeValue appends the record value for the payload (a JSON document)
// of a record on topic to dst. An error that is, or wraps, an
// InvalidPayload error whose InvalidPayload method reports true says the
// payload does not fit its schema: the row is invalid, and the invalid-row
// policy applies (its reason is the error's text, which names the field path
// and what is wrong). Any other error (the registry unreachable or refusing)
// is returned by Route, naming the row, and the row is not routed.
//
// The router calls it from the goroutine that calls Route; an encoder
// shared by several routers must be safe for concurrent use.
type ValueEncoder interface {
	EncodeValue(dst []byte, topic string, payload []byte) ([]byte, error)
}

// InvalidPayload is implemented by a ValueEncoder's errors that say the
// payload does not fit the schema (schemareg's *PayloadError). The router
// and the encoders need not import each other.
type InvalidPayload interface {
	error
	InvalidPayload() bool
}

func isInvalidPayload(err error) bool { return IsInvalidPayload(err) }

// IsInvalidPayload reports whether a ValueEncoder's error says the payload
// does not fit its schema (the row is invalid), rather than that the
// registry could not be used.
func IsInvalidPayload(err error) bool {
	var ip InvalidPayload
	return errors.As(err, &ip) && ip.InvalidPayload()
}

// encode runs the configured encoders on a row that is valid so far: the
// key's first, then the value's. Each replaces w.key or w.value with its
// output, or marks the row invalid, or returns the encoder's other error.
// A dead-lettered row keeps the key and value as they were.
func (r *Router) encode(w *row) error {
	key, value := w.key, w.value
	if r.cfg.Keys != nil && w.hasKey {
		out, err := r.cfg.Keys.EncodeValue(nil, w.topic, w.key)
		switch {
		case err == nil:
			key = out
		case isInvalidPayload(err):
			w.fail(r.aggID.spec, "aggregate id: column "+strconv.Quote(r.aggID.column)+": "+err.Error())
			return nil
		default:
			return err
		}
	}
	if r.cfg.Values != nil {
		out, err := r.cfg.Values.EncodeValue(nil, w.topic, w.value)
		switch {
		case err == nil:
			value = out
		case isInvalidPayload(err):
			w.fail(r.payload.spec, "payload: column "+strconv.Quote(r.payload.column)+": "+err.Error())
			return nil
		default:
			return err
		}
	}
	w.key, w.value = key, value
	return nil
}

// encodeError names the row whose value could not be encoded for a reason
// other than its payload (the registry's); the row is not routed, so its
// LSN is not confirmed.
func (r *Router) encodeError(ins *decoder.Insert, w *row, err error) error {
	id := "<none>"
	if w.hasID {
		id = strconv.Quote(string(w.id))
	}
	return fmt.Errorf("router: row id %s in %s at LSN %s (xid %d), topic %q: encoding the value: %w",
		id, ins.Relation.QualifiedName(), ins.LSN, ins.XID, w.topic, err)
}
