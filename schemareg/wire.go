package schemareg

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Magic is the first byte of every record in Confluent's wire format.
const Magic = 0

// maxIndexDepth bounds the message-index list ParseHeader accepts: the list
// is one index per nesting level of the Protobuf message, and no .proto file
// nests messages this deep. Without a bound a forged length makes the parser
// allocate without limit (sr.ConfluentHeader.DecodeIndex does).
const maxIndexDepth = 64

// ErrBadHeader means bytes are not in Confluent's wire format.
var ErrBadHeader = errors.New("not in Confluent wire format")

// AppendHeader appends the wire-format header for schema id, and for a
// Protobuf record the message-index list (nil for Avro and JSON Schema), to
// b. The index [0], the first message of the file, is written as the single
// byte 0, as Confluent's serializers write it.
func AppendHeader(b []byte, id uint32, index []int) []byte {
	b = append(b, Magic)
	b = binary.BigEndian.AppendUint32(b, id)
	if index == nil {
		return b
	}
	if len(index) == 1 && index[0] == 0 {
		return append(b, 0)
	}
	b = binary.AppendVarint(b, int64(len(index)))
	for _, i := range index {
		b = binary.AppendVarint(b, int64(i))
	}
	return b
}

// ParseHeader splits a wire-format record into its schema id and body. It
// never panics and does not allocate.
func ParseHeader(b []byte) (id uint32, body []byte, err error) {
	if len(b) < 5 {
		return 0, nil, fmt.Errorf("%w: %d bytes, the header alone is 5", ErrBadHeader, len(b))
	}
	if b[0] != Magic {
		return 0, nil, fmt.Errorf("%w: first byte is 0x%02x, not the magic byte 0x00", ErrBadHeader, b[0])
	}
	return binary.BigEndian.Uint32(b[1:5]), b[5:], nil
}

// ParseIndex splits a Protobuf body (what ParseHeader returned) into its
// message-index list and the message bytes. It never panics; a list longer
// than 64 entries, a negative length or index, or a truncated varint is
// ErrBadHeader.
func ParseIndex(body []byte) (index []int, msg []byte, err error) {
	n, k := binary.Varint(body)
	if k <= 0 {
		return nil, nil, fmt.Errorf("%w: truncated message-index length", ErrBadHeader)
	}
	body = body[k:]
	if n == 0 {
		return []int{0}, body, nil
	}
	if n < 0 || n > maxIndexDepth {
		return nil, nil, fmt.Errorf("%w: message-index list of %d entries (at most %d)", ErrBadHeader, n, maxIndexDepth)
	}
	index = make([]int, n)
	for i := range index {
		v, k := binary.Varint(body)
		if k <= 0 {
			return nil, nil, fmt.Errorf("%w: truncated message index %d of %d", ErrBadHeader, i+1, n)
		}
		if v < 0 || v > 1<<31-1 {
			return nil, nil, fmt.Errorf("%w: message index %d is %d", ErrBadHeader, i+1, v)
		}
		index[i] = int(v)
		body = body[k:]
	}
	return index, body, nil
}
