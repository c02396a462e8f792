package decoder

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode feeds two arbitrary messages to a Decoder that has already seen
// fixRelation and fixBegin (so Insert, Commit and transactional Message paths
// are reachable), and the first one also to a fresh Decoder. Two messages let
// the fuzzer combine a Relation with an Insert that disagrees with it.
//
// Properties:
//   - Decode never panics, and never reaches its recover (a recovered panic
//     is a missing bounds check and fails the target);
//   - an error is an *Error wrapping exactly the documented sentinels, with a
//     nil result;
//   - a success is one of the Decoded types, internally consistent, owns its
//     bytes (mutating the input afterwards changes nothing), and for Insert,
//     Begin, Commit and Message re-encodes to exactly the input.
func FuzzDecode(f *testing.F) {
	fixtures := [][]byte{fixBegin, fixCommit, fixRelation, fixInsert, fixMessage}
	for _, a := range fixtures {
		f.Add(a, []byte(nil))
		f.Add(a[:len(a)-1], []byte(nil))
	}
	f.Add(fixRelation, fixInsert)
	f.Add(fixInsert, fixCommit)
	f.Add(fixMessage, fixCommit)
	f.Add(fixCommit, fixBegin)
	f.Add(relationMsg(&Relation{ID: fixRelID, Namespace: "public", Name: "outbox", Columns: []Column{{Name: "id"}}}), fixInsert)
	f.Add([]byte{'S', 0, 0, 0x02, 0xee, 1}, []byte{})
	// Inputs that panic pglogrepl.Parse: empty, a Relation announcing 65535
	// columns, a truncated tuple value, a message content length of 4 GiB.
	f.Add([]byte{}, []byte{})
	f.Add(cat([]byte{'R', 0, 0, 0x40, 0x01}, []byte("public\x00outbox\x00d"), []byte{0xff, 0xff}), fixInsert)
	f.Add(fixInsert[:len(fixInsert)-4], []byte(nil))
	f.Add(cat(fixMessage[:10], []byte("walbox\x00"), []byte{0xff, 0xff, 0xff, 0xff}, []byte("hi")), []byte(nil))
	// testdata/fuzz/FuzzDecode holds further regression inputs:
	//   - message_truncated_before_content_length: a logical decoding message
	//     ending right after its prefix. The fuzzer found it within a second
	//     when the "truncated before content length" check in decodeMessage
	//     was removed on purpose, to prove the target catches a missing
	//     bounds check; with the check it must be ErrMalformed, not a
	//     recovered panic.

	// Protocol version 2 stream messages, and changes tagged with their
	// xid, fed to a streaming decoder outside and inside a stream block.
	for _, a := range [][]byte{fixStreamStart, fixStreamStop, fixStreamCommit, fixStreamAbortSub, fixStreamAbortParallel,
		streamed(750, fixRelation), streamed(751, fixInsert), streamed(750, fixMessage)} {
		f.Add(a, []byte(nil))
		f.Add(a[:len(a)-1], []byte(nil))
	}
	f.Add(fixStreamStop, fixStreamCommit)
	f.Add(streamed(750, fixInsert), fixStreamStop)

	f.Fuzz(func(t *testing.T, first, second []byte) {
		fresh := New()
		checkDecode(t, fresh, first)

		d := openTx(t)
		checkDecode(t, d, first)
		checkDecode(t, d, second)

		// Streaming on, outside a stream block, then inside one.
		out := streamingDecoder()
		checkDecode(t, out, first)
		checkDecode(t, out, second)
		in := streamingDecoder()
		if _, err := in.Decode(0, fixStreamStart); err != nil {
			t.Fatal(err)
		}
		checkDecode(t, in, first)
		checkDecode(t, in, second)
	})
}

func be32b(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

var sentinels = []error{ErrMalformed, ErrUnknownRelation, ErrProtocol, ErrStreamingUnsupported, ErrUnknownMessage}

func checkDecode(t *testing.T, d *Decoder, in []byte) {
	t.Helper()
	const walStart = 0x1_0000_0000
	buf := bytes.Clone(in) // Decode gets its own buffer, scribbled on afterwards
	wasInTx := d.InTransaction()
	got, err := d.Decode(walStart, buf)

	if err != nil {
		if got != nil {
			t.Fatalf("Decode(%q) returned %#v and error %v", in, got, err)
		}
		var pe *panicError
		if errors.As(err, &pe) {
			t.Fatalf("Decode(%q) panicked (recovered): %v", in, pe.value)
		}
		var de *Error
		if !errors.As(err, &de) || de.LSN != walStart {
			t.Fatalf("Decode(%q) error %#v is not an *Error at the input LSN", in, err)
		}
		n := 0
		for _, s := range sentinels {
			if errors.Is(err, s) {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("Decode(%q) error %v wraps %d sentinels, want 1", in, err, n)
		}
		_ = err.Error()
		if d.InTransaction() != wasInTx {
			t.Fatalf("failed Decode(%q) changed InTransaction", in)
		}
		return
	}

	var reencoded []byte
	var snapshot func() []byte // serialises what the result holds, to compare after scribbling
	switch v := got.(type) {
	case *Insert:
		if v.Relation == nil || len(v.Values) != len(v.Relation.Columns) {
			t.Fatalf("Insert with %d values for relation %#v", len(v.Values), v.Relation)
		}
		for i, val := range v.Values {
			null := val.Kind == KindNull || val.Kind == KindUnchangedToast
			if null != (val.Data == nil) {
				t.Fatalf("value %d kind %d has Data %#v", i, val.Kind, val.Data)
			}
		}
		reencoded = insertMsg(v.Relation.ID, v.Values)
		snapshot = func() []byte { return insertMsg(v.Relation.ID, v.Values) }
	case *Begin:
		reencoded = beginMsg(v.CommitLSN, v.CommitTime, v.XID)
	case *Commit:
		reencoded = commitMsg(v.CommitLSN, v.EndLSN, v.CommitTime)
	case *Message:
		reencoded = messageMsg(v.Transactional, v.LSN, v.Prefix, v.Content)
		if v.Transactional && (!d.inTx || v.XID != d.xid || v.CommitLSN != d.commitLSN) {
			t.Fatalf("transactional message without its transaction's identity: %#v", v)
		}
		if !v.Transactional && (v.XID != 0 || v.CommitLSN != 0 || !v.CommitTime.IsZero()) {
			t.Fatalf("non-transactional message with a transaction identity: %#v", v)
		}
		snapshot = func() []byte { return messageMsg(v.Transactional, v.LSN, v.Prefix, v.Content) }
	case *Relation:
		if d.relations[v.ID] != v {
			t.Fatalf("decoded relation %d is not the cached one", v.ID)
		}
		snapshot = func() []byte { return relationMsg(v) }
	case *Ignored:
		if v.Kind != in[0] {
			t.Fatalf("Ignored{Kind: %q} for a %q message", v.Kind, in[0])
		}
	case *StreamStart:
		first := byte(0)
		if v.First {
			first = 1
		}
		reencoded = cat([]byte{'S'}, be32b(v.XID), []byte{first})
	case *StreamStop:
		reencoded = []byte{'E'}
	case *StreamCommit:
		reencoded = cat([]byte{'c'}, be32b(v.XID), commitMsg(v.CommitLSN, v.EndLSN, v.CommitTime)[1:])
	case *StreamAbort:
		reencoded = cat([]byte{'A'}, be32b(v.XID), be32b(v.SubXID))
		if v.AbortLSN != 0 || !v.AbortTime.IsZero() || len(in) == streamAbortParallelLen {
			reencoded = cat(reencoded, in[9:])
		}
	case *StreamChange:
		if v.Kind != in[0] || v.TopXID != d.streamXID || v.XID == 0 {
			t.Fatalf("StreamChange %#v for %q in the block of %d", v, in, d.streamXID)
		}
		if v.Kind == 'O' {
			reencoded = v.Data
		} else {
			reencoded = cat(v.Data[:1], be32b(v.XID), v.Data[1:])
		}
		snapshot = func() []byte { return bytes.Clone(v.Data) }
	default:
		t.Fatalf("Decode(%q) returned %T", in, got)
	}
	if reencoded != nil && !bytes.Equal(reencoded, in) {
		t.Fatalf("%T re-encodes to\n%q\nnot the input\n%q", got, reencoded, in)
	}
	if snapshot != nil {
		before := snapshot()
		for i := range buf {
			buf[i] ^= 0xff
		}
		if after := snapshot(); !bytes.Equal(before, after) {
			t.Fatalf("%T changed when its input buffer was overwritten", got)
		}
	}
}
