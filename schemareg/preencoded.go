package schemareg

import (
	"context"
	"errors"
	"strconv"

	"github.com/twmb/franz-go/pkg/sr"
)

// FormatPreEncoded is for payloads already in Confluent's wire format (a
// bytea column written by a producer that serialized with the registry, as
// Debezium's ByteArrayConverter setups carry them): the payload passes
// through as it is, after checking the magic byte and that the registry
// holds the schema id. Not a Formats entry: it selects no schema.
const FormatPreEncoded Format = "pre-encoded"

// preEncoded checks a pre-encoded payload and appends it to dst.
func (e *Encoder) preEncoded(ctx context.Context, dst, payload []byte) ([]byte, error) {
	id, _, err := ParseHeader(payload)
	if err != nil {
		return dst, &PayloadError{Path: "$", Problem: "a pre-encoded payload must be in Confluent wire format: " + err.Error()}
	}
	key := "id " + strconv.FormatUint(uint64(id), 10)
	if _, ok := e.cache.Get(key); !ok {
		e.misses.Inc()
		_, err := e.cl.SchemaByID(ctx, "", int(id))
		e.count(err, key)
		var resp *sr.ResponseError
		switch {
		case errors.As(err, &resp) && resp.ErrorCode == sr.ErrSchemaNotFound.Code:
			// The row names a schema that does not exist: no consumer
			// could decode it.
			return dst, &PayloadError{ID: int(id), Path: "$", Problem: "the payload's schema id " + strconv.FormatUint(uint64(id), 10) +
				" does not exist in the registry"}
		case err != nil:
			return dst, err
		}
		e.cache.Add(key, &resolved{id: int(id)})
	}
	return append(dst, payload...), nil
}
