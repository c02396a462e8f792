package decoder

import (
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestDecodeBegin(t *testing.T) {
	tests := []struct {
		name    string
		prior   [][]byte // messages decoded first
		in      []byte
		want    *Begin
		wantErr error
	}{
		{
			name: "fixture",
			in:   fixBegin,
			want: &Begin{XID: fixXID, CommitLSN: fixCommitLSN, CommitTime: fixCommitTime},
		},
		{
			// Timestamps before 2000-01-01 are negative; the conversion must
			// floor, not truncate towards zero, or this lands a second late.
			name: "commit time before the Postgres epoch",
			in: cat(
				[]byte{'B'},                    // Byte1('B')
				[]byte{0, 0, 0, 0, 0, 0, 0, 1}, // Int64: final LSN 0/1
				[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xf8, 0x5e, 0xe0}, // Int64: -500000 µs
				[]byte{0xff, 0xff, 0xff, 0xff},                         // Int32: xid 4294967295
			),
			want: &Begin{XID: 1<<32 - 1, CommitLSN: 1, CommitTime: time.Date(1999, 12, 31, 23, 59, 59, 500000000, time.UTC)},
		},
		{
			name: "final LSN 0/0",
			in: cat(
				[]byte{'B'},                    // Byte1('B')
				[]byte{0, 0, 0, 0, 0, 0, 0, 0}, // Int64: final LSN 0/0, invalid
				fixBegin[9:],                   // commit time, xid
			),
			wantErr: ErrMalformed,
		},
		{
			name:    "truncated xid",
			in:      fixBegin[:len(fixBegin)-1],
			wantErr: ErrMalformed,
		},
		{
			name:    "only the type byte",
			in:      []byte{'B'},
			wantErr: ErrMalformed,
		},
		{
			name:    "trailing byte",
			in:      cat(fixBegin, []byte{0}),
			wantErr: ErrMalformed,
		},
		{
			name:    "begin inside a transaction",
			prior:   [][]byte{fixBegin},
			in:      beginMsg(fixEndLSN+0x100, fixCommitTime, fixXID+1),
			wantErr: ErrProtocol,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New()
			for _, m := range tt.prior {
				if _, err := d.Decode(0, m); err != nil {
					t.Fatalf("prior message: %v", err)
				}
			}
			wasInTx := d.InTransaction()
			got, err := d.Decode(fixCommitLSN, tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("result %#v alongside an error", got)
				}
				if d.InTransaction() != wasInTx {
					t.Errorf("failed Decode changed InTransaction to %v", d.InTransaction())
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			if !d.InTransaction() {
				t.Error("InTransaction() = false after Begin")
			}
		})
	}
}

// The Begin opened by a failed second Begin must stay the open one, so its
// Commit still matches.
func TestDecodeBeginInsideTransactionKeepsFirst(t *testing.T) {
	d := New()
	mustDecode(t, d, fixBegin)
	if _, err := d.Decode(0, beginMsg(fixEndLSN+0x100, fixCommitTime, fixXID+1)); !errors.Is(err, ErrProtocol) {
		t.Fatalf("second Begin: err = %v, want ErrProtocol", err)
	}
	mustDecode(t, d, fixCommit)
}

func mustDecode(t *testing.T, d *Decoder, msg []byte) Decoded {
	t.Helper()
	got, err := d.Decode(0, msg)
	if err != nil {
		t.Fatalf("Decode(%q...): %v", msg[:1], err)
	}
	return got
}
