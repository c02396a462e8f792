package decoder

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

// Stream messages of pgoutput protocol version 2, as a PostgreSQL 14+
// walsender sends them with streaming 'on', annotated field by field.

// fixStreamStart opens the first stream block of transaction 750.
var fixStreamStart = cat(
	[]byte{'S'},                    // Byte1('S'): Stream Start
	[]byte{0x00, 0x00, 0x02, 0xee}, // Int32: xid 750
	[]byte{0x01},                   // Int8: 1 = the transaction's first block
)

// fixStreamStop closes the block.
var fixStreamStop = []byte{'E'} // Byte1('E'): Stream Stop

// fixStreamCommit commits transaction 750.
var fixStreamCommit = cat(
	[]byte{'c'},                    // Byte1('c'): Stream Commit
	[]byte{0x00, 0x00, 0x02, 0xee}, // Int32: xid 750
	[]byte{0x00},                   // Int8: flags, unused (0)
	[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x48}, // Int64: commit LSN 0/16B3748
	[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x78}, // Int64: end LSN 0/16B3778
	[]byte{0x00, 0x02, 0xba, 0x61, 0xfe, 0xa3, 0x32, 0x40}, // Int64: commit time 767880000123456 µs
)

// fixStreamAbortSub rolls back subtransaction 751 of 750.
var fixStreamAbortSub = cat(
	[]byte{'A'},                    // Byte1('A'): Stream Abort
	[]byte{0x00, 0x00, 0x02, 0xee}, // Int32: xid 750
	[]byte{0x00, 0x00, 0x02, 0xef}, // Int32: subxid 751
)

// fixStreamAbortParallel is the protocol version 4 form with streaming
// 'parallel': the whole of 750 rolled back, with abort LSN and time.
var fixStreamAbortParallel = cat(
	[]byte{'A'},                    // Byte1('A'): Stream Abort
	[]byte{0x00, 0x00, 0x02, 0xee}, // Int32: xid 750
	[]byte{0x00, 0x00, 0x02, 0xee}, // Int32: subxid 750 = the whole transaction
	[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x48}, // Int64: abort LSN 0/16B3748
	[]byte{0x00, 0x02, 0xba, 0x61, 0xfe, 0xa3, 0x32, 0x40}, // Int64: abort time
)

// streamed inserts the xid of a (sub)transaction after the type byte, as
// the server does for every change inside a stream block.
func streamed(xid uint32, msg []byte) []byte {
	return cat(msg[:1], []byte{byte(xid >> 24), byte(xid >> 16), byte(xid >> 8), byte(xid)}, msg[1:])
}

func streamingDecoder() *Decoder {
	d := New()
	d.SetStreaming(true)
	return d
}

func TestDecodeStreamMessages(t *testing.T) {
	d := streamingDecoder()
	steps := []struct {
		name string
		in   []byte
		want Decoded
	}{
		{"start", fixStreamStart, &StreamStart{XID: 750, First: true}},
		{"relation in the stream", streamed(750, fixRelation), &StreamChange{TopXID: 750, XID: 750, Kind: 'R', LSN: fixInsertLSN, Data: fixRelation}},
		{"insert of a subtransaction", streamed(751, fixInsert), &StreamChange{TopXID: 750, XID: 751, Kind: 'I', LSN: fixInsertLSN, Data: fixInsert}},
		{"message", streamed(750, fixMessage), &StreamChange{TopXID: 750, XID: 750, Kind: 'M', LSN: fixInsertLSN, Data: fixMessage}},
		{"origin has no xid", []byte("O\x00\x00\x00\x00\x00\x00\x00\x01sub\x00"), &StreamChange{TopXID: 750, XID: 750, Kind: 'O', LSN: fixInsertLSN, Data: []byte("O\x00\x00\x00\x00\x00\x00\x00\x01sub\x00")}},
		{"stop", fixStreamStop, &StreamStop{XID: 750}},
		{"abort of a subtransaction", fixStreamAbortSub, &StreamAbort{XID: 750, SubXID: 751}},
		{"commit", fixStreamCommit, &StreamCommit{XID: 750, CommitLSN: fixCommitLSN, EndLSN: fixEndLSN, CommitTime: fixCommitTime}},
		{"abort, parallel form", fixStreamAbortParallel, &StreamAbort{XID: 750, SubXID: 750, AbortLSN: fixCommitLSN, AbortTime: fixCommitTime}},
	}
	for _, s := range steps {
		got, err := d.Decode(fixInsertLSN, s.in)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if !reflect.DeepEqual(got, s.want) {
			t.Fatalf("%s: got %#v, want %#v", s.name, got, s.want)
		}
	}
	if !(&StreamAbort{XID: 750, SubXID: 750}).Whole() || (&StreamAbort{XID: 750, SubXID: 751}).Whole() {
		t.Error("Whole() wrong")
	}
}

// The changes kept from a stream decode, after the commit, to what
// protocol version 1 would have sent.
func TestStreamedChangesReplay(t *testing.T) {
	d := streamingDecoder()
	var kept []*StreamChange
	for _, m := range [][]byte{fixStreamStart, streamed(750, fixRelation), streamed(750, fixInsert), fixStreamStop} {
		got, err := d.Decode(fixInsertLSN, m)
		if err != nil {
			t.Fatal(err)
		}
		if c, ok := got.(*StreamChange); ok {
			kept = append(kept, c)
		}
	}
	out, err := d.Decode(fixCommitLSN, fixStreamCommit)
	if err != nil {
		t.Fatal(err)
	}
	sc := out.(*StreamCommit)
	b, err := d.BeginStreamed(sc)
	if err != nil {
		t.Fatal(err)
	}
	if *b != (Begin{XID: 750, CommitLSN: fixCommitLSN, CommitTime: fixCommitTime}) {
		t.Fatalf("begin %#v", b)
	}
	var ins *Insert
	for _, c := range kept {
		got, err := d.Decode(c.LSN, c.Data)
		if err != nil {
			t.Fatal(err)
		}
		if i, ok := got.(*Insert); ok {
			ins = i
		}
	}
	want, err := openTx(t).Decode(fixInsertLSN, fixInsert)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(ins, want) {
		t.Fatalf("replayed insert %#v, want %#v", ins, want)
	}
	c, err := d.CommitStreamed(sc)
	if err != nil || *c != (Commit{CommitLSN: fixCommitLSN, EndLSN: fixEndLSN, CommitTime: fixCommitTime}) {
		t.Fatalf("commit %#v, %v", c, err)
	}
	if d.InTransaction() || d.InStream() {
		t.Fatal("state left open")
	}
}

func TestStreamChangeAborted(t *testing.T) {
	aborted := map[uint32]bool{751: true}
	for _, tt := range []struct {
		kind byte
		xid  uint32
		want bool
	}{
		{'I', 751, true}, {'M', 751, true}, {'U', 751, true}, {'D', 751, true}, {'T', 751, true},
		{'I', 750, false},
		// The server describes a relation once per streamed transaction,
		// in whichever subtransaction needed it first; later changes rely
		// on it, so it survives the rollback of that subtransaction.
		{'R', 751, false}, {'Y', 751, false},
	} {
		c := &StreamChange{TopXID: 750, XID: tt.xid, Kind: tt.kind}
		if got := c.Aborted(aborted); got != tt.want {
			t.Errorf("%q of %d: Aborted = %v, want %v", tt.kind, tt.xid, got, tt.want)
		}
	}
}

func TestDecodeStreamErrors(t *testing.T) {
	tests := []struct {
		name    string
		prime   [][]byte // decoded first, must succeed
		in      []byte
		wantErr error
	}{
		{"start too short", nil, fixStreamStart[:5], ErrMalformed},
		{"start flag 2", nil, cat(fixStreamStart[:5], []byte{2}), ErrMalformed},
		{"start of xid 0", nil, []byte{'S', 0, 0, 0, 0, 1}, ErrMalformed},
		{"stop without start", nil, fixStreamStop, ErrProtocol},
		{"stop with trailing bytes", [][]byte{fixStreamStart}, []byte{'E', 0}, ErrMalformed},
		{"start inside a block", [][]byte{fixStreamStart}, fixStreamStart, ErrProtocol},
		{"start inside a transaction", [][]byte{fixBegin}, fixStreamStart, ErrProtocol},
		{"begin inside a block", [][]byte{fixStreamStart}, fixBegin, ErrProtocol},
		{"commit inside a block", [][]byte{fixStreamStart}, fixStreamCommit, ErrProtocol},
		{"abort inside a block", [][]byte{fixStreamStart}, fixStreamAbortSub, ErrProtocol},
		{"change without its xid", [][]byte{fixStreamStart}, []byte{'I', 0, 0}, ErrMalformed},
		{"change of xid 0", [][]byte{fixStreamStart}, streamed(0, fixInsert), ErrMalformed},
		{"unknown type in a block", [][]byte{fixStreamStart}, []byte{'P', 0, 0, 0, 1}, ErrUnknownMessage},
		{"empty in a block", [][]byte{fixStreamStart}, []byte{}, ErrMalformed},
		{"stream commit truncated", nil, fixStreamCommit[:len(fixStreamCommit)-1], ErrMalformed},
		{"stream commit flags", nil, cat(fixStreamCommit[:5], []byte{1}, fixStreamCommit[6:]), ErrMalformed},
		{"stream commit end before commit", nil, cat(fixStreamCommit[:6], fixStreamCommit[14:22], fixStreamCommit[6:14], fixStreamCommit[22:]), ErrMalformed},
		{"stream commit inside a transaction", [][]byte{fixBegin}, fixStreamCommit, ErrProtocol},
		{"abort of length 10", nil, cat(fixStreamAbortSub, []byte{0}), ErrMalformed},
		{"abort of subxid 0", nil, []byte{'A', 0, 0, 2, 0xee, 0, 0, 0, 0}, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := streamingDecoder()
			for _, p := range tt.prime {
				if _, err := d.Decode(fixInsertLSN, p); err != nil {
					t.Fatalf("prime: %v", err)
				}
			}
			inTx, inStream := d.InTransaction(), d.InStream()
			got, err := d.Decode(fixInsertLSN, tt.in)
			if !errors.Is(err, tt.wantErr) || got != nil {
				t.Fatalf("got %#v, %v; want %v", got, err, tt.wantErr)
			}
			if d.InTransaction() != inTx || d.InStream() != inStream {
				t.Fatal("a failed Decode changed the state")
			}
		})
	}
}

// Without SetStreaming every stream message is refused, as before.
func TestStreamMessagesNeedSetStreaming(t *testing.T) {
	for _, m := range [][]byte{fixStreamStart, fixStreamStop, fixStreamCommit, fixStreamAbortSub} {
		if _, err := New().Decode(fixInsertLSN, m); !errors.Is(err, ErrStreamingUnsupported) {
			t.Errorf("%q: %v, want ErrStreamingUnsupported", m[0], err)
		}
	}
}

// The copy in a StreamChange is the decoder's own.
func TestStreamChangeOwnsData(t *testing.T) {
	d := streamingDecoder()
	if _, err := d.Decode(0, fixStreamStart); err != nil {
		t.Fatal(err)
	}
	in := streamed(750, fixInsert)
	got, err := d.Decode(0, in)
	if err != nil {
		t.Fatal(err)
	}
	for i := range in {
		in[i] ^= 0xff
	}
	if !bytes.Equal(got.(*StreamChange).Data, fixInsert) {
		t.Fatal("StreamChange.Data changed with its input")
	}
}
