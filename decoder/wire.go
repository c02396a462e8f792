package decoder

import (
	"bytes"
	"encoding/binary"
	"time"
)

// pgoutput message type bytes (protocol version 1, plus the version 2 stream
// messages so they can be refused by name). See the PostgreSQL documentation,
// "Logical Replication Message Formats".
const (
	msgBegin        = 'B'
	msgCommit       = 'C'
	msgOrigin       = 'O'
	msgRelation     = 'R'
	msgType         = 'Y'
	msgInsert       = 'I'
	msgUpdate       = 'U'
	msgDelete       = 'D'
	msgTruncate     = 'T'
	msgMessage      = 'M'
	msgStreamStart  = 'S'
	msgStreamStop   = 'E'
	msgStreamCommit = 'c'
	msgStreamAbort  = 'A'
)

// Tuple column kinds inside TupleData.
const (
	colNull      = 'n'
	colUnchanged = 'u'
	colText      = 't'
	colBinary    = 'b'
)

// Fixed message sizes, type byte included.
const (
	// Byte1('B') Int64 final LSN, Int64 commit time, Int32 xid.
	beginLen = 1 + 8 + 8 + 4
	// Byte1('C') Int8 flags, Int64 commit LSN, Int64 end LSN, Int64 commit time.
	commitLen = 1 + 1 + 8 + 8 + 8
	// Byte1('I') Int32 relation OID, Byte1('N'), Int16 column count.
	insertHeaderLen = 1 + 4 + 1 + 2
	// Int8 flags, String name (at least its NUL), Int32 type OID, Int32 typmod.
	minRelationColumnLen = 1 + 1 + 4 + 4
)

// microsecFromUnixEpochToY2K is the offset between the Unix epoch and the
// Postgres epoch (2000-01-01 00:00:00 UTC) that timestamps are counted from.
const microsecFromUnixEpochToY2K = 946_684_800 * 1_000_000

// pgTime converts a Postgres timestamp (microseconds since 2000-01-01 UTC) to
// a UTC time.Time. Unlike pglogrepl's helper it splits seconds from
// microseconds first, so no int64 value overflows into a wrong time.
func pgTime(microsecSinceY2K int64) time.Time {
	sec := microsecSinceY2K / 1_000_000
	usec := microsecSinceY2K % 1_000_000 // same sign as sec; time.Unix normalises
	return time.Unix(sec+microsecFromUnixEpochToY2K/1_000_000, usec*1000).UTC()
}

func be16(b []byte) uint16 { return binary.BigEndian.Uint16(b) }
func be32(b []byte) uint32 { return binary.BigEndian.Uint32(b) }
func be64(b []byte) uint64 { return binary.BigEndian.Uint64(b) }

// cstring reads a NUL-terminated string starting at off. It returns the
// string and the offset just past the NUL, or ok=false if there is no NUL.
func cstring(b []byte, off int) (s string, next int, ok bool) {
	if off > len(b) {
		return "", off, false
	}
	end := bytes.IndexByte(b[off:], 0)
	if end < 0 {
		return "", off, false
	}
	return string(b[off : off+end]), off + end + 1, true
}
