package decoder

import (
	"errors"
	"reflect"
	"testing"
)

func TestDecodeMessage(t *testing.T) {
	tests := []struct {
		name    string
		inTx    bool // decode after fixBegin
		in      []byte
		want    *Message
		wantErr error
	}{
		{
			name: "transactional fixture takes the transaction's identity",
			inTx: true,
			in:   fixMessage,
			want: &Message{
				XID: fixXID, CommitLSN: fixCommitLSN, CommitTime: fixCommitTime,
				LSN: fixMsgLSN, Transactional: true, Prefix: "walbox", Content: []byte("hi"),
			},
		},
		{
			name: "non-transactional outside a transaction",
			in: cat(
				[]byte{'M'},  // Byte1('M')
				[]byte{0x00}, // Int8: flags, 0 = not transactional
				[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x00}, // Int64: message LSN 0/16B3700
				[]byte("\x00"),                 // String: empty prefix
				[]byte{0x00, 0x00, 0x00, 0x00}, // Int32: content length 0
			),
			// Content is an owned, non-nil empty slice.
			want: &Message{LSN: fixMsgLSN, Prefix: "", Content: []byte{}},
		},
		{
			// A non-transactional message is not part of the transaction
			// it happens to be decoded inside, so it gets no XID.
			name: "non-transactional inside a transaction",
			inTx: true,
			in:   messageMsg(false, fixMsgLSN, "heartbeat", []byte{0, 1, 2}),
			want: &Message{LSN: fixMsgLSN, Prefix: "heartbeat", Content: []byte{0, 1, 2}},
		},
		{
			name:    "transactional outside a transaction",
			in:      fixMessage,
			wantErr: ErrProtocol,
		},
		{
			name:    "undefined flag bit",
			inTx:    true,
			in:      cat([]byte{'M', 0x03}, fixMessage[2:]),
			wantErr: ErrMalformed,
		},
		{
			name:    "only the type byte",
			in:      []byte{'M'},
			wantErr: ErrMalformed,
		},
		{
			name:    "prefix not terminated",
			inTx:    true,
			in:      cat(fixMessage[:10], []byte("walbox-without-a-nul")),
			wantErr: ErrMalformed,
		},
		{
			name:    "truncated inside the content length",
			inTx:    true,
			in:      cat(fixMessage[:10], []byte("walbox\x00"), []byte{0, 0}),
			wantErr: ErrMalformed,
		},
		{
			// pglogrepl.Parse panics on this one: it slices by the length.
			name: "content length beyond the message",
			inTx: true,
			in: cat(
				fixMessage[:10],                // type, flags, LSN
				[]byte("walbox\x00"),           // String: prefix
				[]byte{0xff, 0xff, 0xff, 0xff}, // Int32: content length 4294967295
				[]byte("hi"),
			),
			wantErr: ErrMalformed,
		},
		{
			name:    "content shorter than announced",
			inTx:    true,
			in:      fixMessage[:len(fixMessage)-1],
			wantErr: ErrMalformed,
		},
		{
			name:    "trailing bytes after the content",
			inTx:    true,
			in:      cat(fixMessage, []byte{0}),
			wantErr: ErrMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New()
			if tt.inTx {
				mustDecode(t, d, fixBegin)
			}
			got, err := d.Decode(fixMsgLSN, tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("result %#v alongside an error", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			if d.InTransaction() != tt.inTx {
				t.Errorf("InTransaction() = %v after a message, want %v", d.InTransaction(), tt.inTx)
			}
		})
	}
}
