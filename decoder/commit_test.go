package decoder

import (
	"errors"
	"reflect"
	"testing"
)

func TestDecodeCommit(t *testing.T) {
	tests := []struct {
		name    string
		prior   [][]byte
		in      []byte
		want    *Commit
		wantErr error
	}{
		{
			name:  "fixture",
			prior: [][]byte{fixBegin},
			in:    fixCommit,
			want:  &Commit{CommitLSN: fixCommitLSN, EndLSN: fixEndLSN, CommitTime: fixCommitTime},
		},
		{
			// No flag is defined for proto_version 1; Postgres' own
			// subscriber refuses them too.
			name:    "nonzero flags",
			prior:   [][]byte{fixBegin},
			in:      cat([]byte{'C', 0x80}, fixCommit[2:]),
			wantErr: ErrMalformed,
		},
		{
			name:    "without a Begin",
			in:      fixCommit,
			wantErr: ErrProtocol,
		},
		{
			name:    "commit LSN differs from the Begin's final LSN",
			prior:   [][]byte{fixBegin},
			in:      commitMsg(fixCommitLSN+8, fixEndLSN, fixCommitTime),
			wantErr: ErrProtocol,
		},
		{
			// The end LSN is what walbox confirms; a garbled one that does
			// not follow the commit record is refused.
			name:  "end LSN not after commit LSN",
			prior: [][]byte{fixBegin},
			in: cat(
				[]byte{'C'}, // Byte1('C')
				[]byte{0x00},
				[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x48}, // Int64: commit LSN 0/16B3748
				[]byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x6b, 0x37, 0x48}, // Int64: end LSN, the same
				[]byte{0x00, 0x02, 0xba, 0x61, 0xfe, 0xa3, 0x32, 0x40}, // Int64: commit time
			),
			wantErr: ErrMalformed,
		},
		{
			name:    "truncated commit time",
			prior:   [][]byte{fixBegin},
			in:      fixCommit[:len(fixCommit)-3],
			wantErr: ErrMalformed,
		},
		{
			name:    "trailing byte",
			prior:   [][]byte{fixBegin},
			in:      cat(fixCommit, []byte{0}),
			wantErr: ErrMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New()
			for _, m := range tt.prior {
				mustDecode(t, d, m)
			}
			wasInTx := d.InTransaction()
			got, err := d.Decode(fixEndLSN, tt.in)
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
			if d.InTransaction() {
				t.Error("InTransaction() = true after Commit")
			}
		})
	}
}

// After a Commit the next transaction starts clean: an Insert before its
// Begin is out of order, and the next Begin is accepted.
func TestCommitClosesTransaction(t *testing.T) {
	d := openTx(t)
	mustDecode(t, d, fixInsert)
	mustDecode(t, d, fixCommit)
	if _, err := d.Decode(0, fixInsert); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Insert after Commit: err = %v, want ErrProtocol", err)
	}
	mustDecode(t, d, beginMsg(fixEndLSN+0x100, fixCommitTime, fixXID+1))
	ins := mustDecode(t, d, fixInsert).(*Insert)
	if ins.XID != fixXID+1 || ins.CommitLSN != fixEndLSN+0x100 {
		t.Errorf("Insert in second transaction: XID %d CommitLSN %s", ins.XID, ins.CommitLSN)
	}
}
