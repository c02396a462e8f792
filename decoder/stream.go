package decoder

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// Fixed sizes of the stream messages, type byte included.
const (
	// Byte1('S') Int32 xid, Int8 first segment (1) or not (0).
	streamStartLen = 1 + 4 + 1
	// Byte1('E').
	streamStopLen = 1
	// Byte1('c') Int32 xid, Int8 flags, Int64 commit LSN, Int64 end LSN, Int64 commit time.
	streamCommitLen = 1 + 4 + 1 + 8 + 8 + 8
	// Byte1('A') Int32 xid, Int32 subxid.
	streamAbortLen = 1 + 4 + 4
	// ... Int64 abort LSN, Int64 abort time: protocol version 4 with
	// streaming 'parallel' only.
	streamAbortParallelLen = streamAbortLen + 8 + 8
)

// StreamStart opens a block of changes of the in-progress transaction XID
// (protocol version 2+). First is set on the transaction's first block: a
// consumer that kept earlier blocks of the same XID from another session
// must drop them then.
type StreamStart struct {
	XID   uint32
	First bool
}

// StreamStop closes the block StreamStart opened. XID is that block's
// transaction.
type StreamStop struct {
	XID uint32
}

// StreamCommit commits the streamed transaction XID: its changes, received
// earlier as StreamChange values, are now committed. CommitLSN, EndLSN and
// CommitTime mean what they mean on Begin and Commit.
type StreamCommit struct {
	XID        uint32
	CommitLSN  pglogrepl.LSN
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
}

// StreamAbort rolls back SubXID, a subtransaction of the streamed
// transaction XID, with every change it made; SubXID == XID aborts the whole
// transaction. A rolled back subtransaction tree arrives as one StreamAbort
// per subtransaction. AbortLSN and AbortTime are zero unless the server sends
// them (protocol version 4 with parallel streaming).
type StreamAbort struct {
	XID, SubXID uint32
	AbortLSN    pglogrepl.LSN
	AbortTime   time.Time
}

// Whole reports whether the abort ends the whole transaction rather than one
// subtransaction.
func (a *StreamAbort) Whole() bool { return a.XID == a.SubXID }

// StreamChange is one message between StreamStart and StreamStop, not decoded
// yet: it belongs to a transaction that may still abort, so it is kept (see
// the pipeline's spool) and decoded only after StreamCommit, between
// BeginStreamed and CommitStreamed, with Decode.
//
// Data is an owned copy of the message in its protocol version 1 form (the
// xid the server inserts after the type byte removed), ready for Decode. XID
// is the (sub)transaction that made the change, TopXID the streamed
// transaction it belongs to. LSN is the XLogData's WAL start.
type StreamChange struct {
	TopXID, XID uint32
	Kind        byte
	LSN         pglogrepl.LSN
	Data        []byte
}

// Aborted reports whether the change belongs to a rolled back
// subtransaction and must be dropped. Relation and Type messages are never
// dropped: the server sends a relation's description once per streamed
// transaction, whichever subtransaction needed it first, and later changes of
// the transaction rely on it.
func (c *StreamChange) Aborted(abortedSubXIDs map[uint32]bool) bool {
	switch c.Kind {
	case msgRelation, msgType, msgOrigin:
		return false
	}
	return abortedSubXIDs[c.XID]
}

func (*StreamStart) decoded()  {}
func (*StreamStop) decoded()   {}
func (*StreamCommit) decoded() {}
func (*StreamAbort) decoded()  {}
func (*StreamChange) decoded() {}

// SetStreaming makes the Decoder accept the stream messages of pgoutput
// protocol versions 2 to 4 without two-phase (START_REPLICATION with
// streaming 'on' or 'parallel'). Without it they are ErrStreamingUnsupported,
// which is right for a session started with proto_version '1'.
func (d *Decoder) SetStreaming(on bool) { d.streaming = on }

// InStream reports whether a StreamStart was seen without its StreamStop.
func (d *Decoder) InStream() bool { return d.inStream }

// BeginStreamed opens the transaction c commits, as a Begin would, so that
// its spooled changes can be decoded with Decode and closed with
// CommitStreamed. It fails like a Begin inside a transaction or stream.
func (d *Decoder) BeginStreamed(c *StreamCommit) (*Begin, error) {
	if d.inTx || d.inStream {
		return nil, newError(c.CommitLSN, msgStreamCommit, ErrProtocol,
			"replay of streamed xid %d while xid %d is open", c.XID, max(d.xid, d.streamXID))
	}
	d.inTx = true
	d.xid = c.XID
	d.commitLSN = c.CommitLSN
	d.commitTime = c.CommitTime
	return &Begin{XID: c.XID, CommitLSN: c.CommitLSN, CommitTime: c.CommitTime}, nil
}

// CommitStreamed closes the transaction BeginStreamed opened.
func (d *Decoder) CommitStreamed(c *StreamCommit) (*Commit, error) {
	if !d.inTx || d.commitLSN != c.CommitLSN {
		return nil, newError(c.CommitLSN, msgStreamCommit, ErrProtocol,
			"end of the replay of streamed xid %d that was not begun", c.XID)
	}
	d.inTx = false
	d.xid = 0
	d.commitLSN = 0
	d.commitTime = time.Time{}
	return &Commit{CommitLSN: c.CommitLSN, EndLSN: c.EndLSN, CommitTime: c.CommitTime}, nil
}

// decodeStream handles a message while streaming is enabled: the four
// stream messages, and everything between StreamStart and StreamStop. ok is
// false when the message is none of these and Decode goes on as usual.
func (d *Decoder) decodeStream(walStart pglogrepl.LSN, data []byte) (out Decoded, ok bool, err error) {
	typ := data[0]
	if d.inStream {
		switch typ {
		case msgStreamStop:
			out, err = d.decodeStreamStop(walStart, data)
		case msgBegin, msgCommit, msgStreamStart, msgStreamCommit, msgStreamAbort:
			err = newError(walStart, typ, ErrProtocol, "inside the stream block of xid %d", d.streamXID)
		default:
			out, err = d.decodeStreamChange(walStart, data)
		}
		return out, true, err
	}
	switch typ {
	case msgStreamStart:
		out, err = d.decodeStreamStart(walStart, data)
	case msgStreamStop:
		err = newError(walStart, typ, ErrProtocol, "without a Stream Start")
	case msgStreamCommit:
		out, err = d.decodeStreamCommit(walStart, data)
	case msgStreamAbort:
		out, err = d.decodeStreamAbort(walStart, data)
	default:
		return nil, false, nil
	}
	return out, true, err
}

// decodeStreamStart parses
//
//	Byte1('S') Int32 xid, Int8 first segment
func (d *Decoder) decodeStreamStart(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	if len(data) != streamStartLen {
		return nil, newError(walStart, msgStreamStart, ErrMalformed, "length %d, want %d", len(data), streamStartLen)
	}
	s := &StreamStart{XID: be32(data[1:])}
	switch data[5] {
	case 0:
	case 1:
		s.First = true
	default:
		return nil, newError(walStart, msgStreamStart, ErrMalformed, "first-segment flag %#04x, want 0 or 1", data[5])
	}
	if s.XID == 0 {
		return nil, newError(walStart, msgStreamStart, ErrMalformed, "xid 0 is no transaction")
	}
	if d.inTx {
		return nil, newError(walStart, msgStreamStart, ErrProtocol,
			"stream start of xid %d inside transaction %d (commit LSN %s)", s.XID, d.xid, d.commitLSN)
	}
	d.inStream = true
	d.streamXID = s.XID
	return s, nil
}

// decodeStreamStop parses Byte1('E').
func (d *Decoder) decodeStreamStop(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	if len(data) != streamStopLen {
		return nil, newError(walStart, msgStreamStop, ErrMalformed, "length %d, want %d", len(data), streamStopLen)
	}
	s := &StreamStop{XID: d.streamXID}
	d.inStream = false
	d.streamXID = 0
	return s, nil
}

// decodeStreamCommit parses
//
//	Byte1('c') Int32 xid, Int8 flags (0), Int64 commit LSN, Int64 end LSN, Int64 commit time
func (d *Decoder) decodeStreamCommit(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	if len(data) != streamCommitLen {
		return nil, newError(walStart, msgStreamCommit, ErrMalformed, "length %d, want %d", len(data), streamCommitLen)
	}
	if data[5] != 0 {
		return nil, newError(walStart, msgStreamCommit, ErrMalformed, "flags %#04x, want 0", data[5])
	}
	c := &StreamCommit{
		XID:        be32(data[1:]),
		CommitLSN:  pglogrepl.LSN(be64(data[6:])),
		EndLSN:     pglogrepl.LSN(be64(data[14:])),
		CommitTime: pgTime(int64(be64(data[22:]))),
	}
	// As for Commit: the end LSN is what gets confirmed.
	if c.CommitLSN == 0 || c.EndLSN <= c.CommitLSN {
		return nil, newError(walStart, msgStreamCommit, ErrMalformed,
			"xid %d: end LSN %s is not after commit LSN %s", c.XID, c.EndLSN, c.CommitLSN)
	}
	if c.XID == 0 {
		return nil, newError(walStart, msgStreamCommit, ErrMalformed, "xid 0 is no transaction")
	}
	if d.inTx {
		return nil, newError(walStart, msgStreamCommit, ErrProtocol,
			"stream commit of xid %d inside transaction %d", c.XID, d.xid)
	}
	return c, nil
}

// decodeStreamAbort parses
//
//	Byte1('A') Int32 xid, Int32 subxid [, Int64 abort LSN, Int64 abort time]
func (d *Decoder) decodeStreamAbort(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	if len(data) != streamAbortLen && len(data) != streamAbortParallelLen {
		return nil, newError(walStart, msgStreamAbort, ErrMalformed,
			"length %d, want %d or %d", len(data), streamAbortLen, streamAbortParallelLen)
	}
	a := &StreamAbort{XID: be32(data[1:]), SubXID: be32(data[5:])}
	if a.XID == 0 || a.SubXID == 0 {
		return nil, newError(walStart, msgStreamAbort, ErrMalformed, "xid %d, subxid %d: 0 is no transaction", a.XID, a.SubXID)
	}
	if len(data) == streamAbortParallelLen {
		a.AbortLSN = pglogrepl.LSN(be64(data[9:]))
		a.AbortTime = pgTime(int64(be64(data[17:])))
	}
	if d.inTx {
		return nil, newError(walStart, msgStreamAbort, ErrProtocol,
			"stream abort of xid %d inside transaction %d", a.XID, d.xid)
	}
	return a, nil
}

// decodeStreamChange checks a message inside a stream block and returns it
// as a StreamChange. Every kind but Origin carries the xid of the
// (sub)transaction that made it right after the type byte.
func (d *Decoder) decodeStreamChange(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	typ := data[0]
	c := &StreamChange{TopXID: d.streamXID, Kind: typ, LSN: walStart}
	switch typ {
	case msgOrigin:
		// Sent by Stream Start itself for a transaction replicated from
		// elsewhere, without an xid; nothing in it matters to walbox.
		c.XID = d.streamXID
		c.Data = append([]byte(nil), data...)
		return c, nil
	case msgRelation, msgType, msgInsert, msgUpdate, msgDelete, msgTruncate, msgMessage:
	default:
		return nil, newError(walStart, typ, ErrUnknownMessage,
			"type byte %#04x inside the stream block of xid %d", typ, d.streamXID)
	}
	if len(data) < 1+4 {
		return nil, newError(walStart, typ, ErrMalformed, "length %d, too short for the xid of a streamed change", len(data))
	}
	c.XID = be32(data[1:])
	if c.XID == 0 {
		return nil, newError(walStart, typ, ErrMalformed, "xid 0 is no transaction")
	}
	c.Data = make([]byte, 0, len(data)-4)
	c.Data = append(c.Data, typ)
	c.Data = append(c.Data, data[5:]...)
	return c, nil
}
