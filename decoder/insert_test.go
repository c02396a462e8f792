package decoder

import (
	"bytes"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

func TestDecodeInsert(t *testing.T) {
	// Every test decodes after openTx: fixRelation (4 columns) and fixBegin.
	tests := []struct {
		name    string
		in      []byte
		want    []Value // compared with Kind and Data; the envelope is checked separately
		wantErr error
	}{
		{
			name: "fixture",
			in:   fixInsert,
			want: []Value{
				{Kind: KindText, Data: []byte("42")},
				{Kind: KindText, Data: []byte("order-7")},
				{Kind: KindText, Data: []byte(`{"a": 1}`)},
				{Kind: KindNull},
			},
		},
		{
			name: "every column kind",
			in: cat(
				[]byte{'I'},                     // Byte1('I')
				[]byte{0x00, 0x00, 0x40, 0x01},  // Int32: relation OID 16385
				[]byte{'N'},                     // Byte1('N')
				[]byte{0x00, 0x04},              // Int16: 4 columns
				[]byte{'b'},                     // Byte1('b'): binary format
				[]byte{0x00, 0x00, 0x00, 0x08},  // Int32: length 8
				[]byte{0, 0, 0, 0, 0, 0, 0, 42}, // Byte8: int8 42 in send format
				[]byte{'t'},                     // Byte1('t'): text
				[]byte{0x00, 0x00, 0x00, 0x00},  // Int32: length 0 (empty string, not NULL)
				[]byte{'u'},                     // Byte1('u'): unchanged TOAST, no data
				[]byte{'n'},                     // Byte1('n'): NULL
			),
			want: []Value{
				{Kind: KindBinary, Data: []byte{0, 0, 0, 0, 0, 0, 0, 42}},
				{Kind: KindText, Data: []byte{}},
				{Kind: KindUnchangedToast},
				{Kind: KindNull},
			},
		},
		{
			// With no value bytes there is no backing array; NULL-ness is
			// in Kind, never in Data == nil.
			name: "all null",
			in:   insertMsg(fixRelID, []Value{{Kind: KindNull}, {Kind: KindNull}, {Kind: KindNull}, {Kind: KindNull}}),
			want: []Value{{Kind: KindNull}, {Kind: KindNull}, {Kind: KindNull}, {Kind: KindNull}},
		},
		{
			// Without other value bytes an empty string must still be
			// non-nil, or it would look like NULL to a Data == nil check.
			name: "empty text with no other data",
			in:   insertMsg(fixRelID, []Value{{Kind: KindText, Data: []byte{}}, {Kind: KindNull}, {Kind: KindUnchangedToast}, {Kind: KindNull}}),
			want: []Value{{Kind: KindText, Data: []byte{}}, {Kind: KindNull}, {Kind: KindUnchangedToast}, {Kind: KindNull}},
		},
		{
			name:    "only the type byte",
			in:      []byte{'I'},
			wantErr: ErrMalformed,
		},
		{
			name:    "header truncated before the column count",
			in:      fixInsert[:7],
			wantErr: ErrMalformed,
		},
		{
			name:    "old-tuple marker instead of N",
			in:      cat([]byte{'I', 0x00, 0x00, 0x40, 0x01, 'K'}, fixInsert[6:]),
			wantErr: ErrMalformed,
		},
		{
			name:    "unknown relation",
			in:      cat([]byte{'I', 0x00, 0x00, 0x40, 0x02}, fixInsert[5:]),
			wantErr: ErrUnknownRelation,
		},
		{
			name:    "fewer columns than the relation",
			in:      insertMsg(fixRelID, []Value{{Kind: KindNull}}),
			wantErr: ErrProtocol,
		},
		{
			// pglogrepl.Parse panics on this one: it reads past the end.
			name:    "tuple truncated inside the last value",
			in:      fixInsert[:len(fixInsert)-4],
			wantErr: ErrMalformed,
		},
		{
			name:    "tuple ends before the last column's kind",
			in:      fixInsert[:len(fixInsert)-1],
			wantErr: ErrMalformed,
		},
		{
			name: "truncated inside a length",
			in: cat(
				fixInsert[:8], // header, 4 columns
				[]byte{'t', 0x00, 0x00},
			),
			wantErr: ErrMalformed,
		},
		{
			name: "negative length",
			in: cat(
				fixInsert[:8],
				[]byte{'t'},                    // Byte1('t')
				[]byte{0xff, 0xff, 0xff, 0xfe}, // Int32: length -2
				[]byte("ab"),
				[]byte{'n', 'n', 'n'},
			),
			wantErr: ErrMalformed,
		},
		{
			name: "length beyond the message",
			in: cat(
				fixInsert[:8],
				[]byte{'b'},                    // Byte1('b')
				[]byte{0x7f, 0xff, 0xff, 0xff}, // Int32: length 2147483647
				[]byte{'n', 'n', 'n'},
			),
			wantErr: ErrMalformed,
		},
		{
			name: "unknown column kind",
			in: cat(
				fixInsert[:8],
				[]byte{'x'}, // Byte1: not n, u, t or b
				[]byte{'n', 'n', 'n'},
			),
			wantErr: ErrMalformed,
		},
		{
			name:    "trailing bytes after the tuple",
			in:      cat(fixInsert, []byte{'n'}),
			wantErr: ErrMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := openTx(t)
			got, err := d.Decode(fixInsertLSN, tt.in)
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
			ins, ok := got.(*Insert)
			if !ok {
				t.Fatalf("got %T, want *Insert", got)
			}
			if ins.XID != fixXID || ins.CommitLSN != fixCommitLSN || !ins.CommitTime.Equal(fixCommitTime) || ins.LSN != fixInsertLSN {
				t.Errorf("envelope XID %d CommitLSN %s CommitTime %v LSN %s, want %d %s %v %s",
					ins.XID, ins.CommitLSN, ins.CommitTime, ins.LSN, fixXID, fixCommitLSN, fixCommitTime, fixInsertLSN)
			}
			if ins.Relation != d.relations[fixRelID] {
				t.Error("Insert does not point at the cached relation")
			}
			if !reflect.DeepEqual(ins.Values, tt.want) {
				t.Errorf("values %q, want %q", ins.Values, tt.want)
			}
		})
	}
}

func TestInsertOutsideTransaction(t *testing.T) {
	d := New()
	mustDecode(t, d, fixRelation)
	if _, err := d.Decode(fixInsertLSN, fixInsert); !errors.Is(err, ErrProtocol) {
		t.Fatalf("err = %v, want ErrProtocol", err)
	}
}

// WALData points into pgproto3's read buffer, which the next receive
// overwrites. Everything decoded must survive that.
func TestDecodedDataIndependentOfInput(t *testing.T) {
	d := New()
	buf := bytes.Clone(fixRelation)
	rel := mustDecode(t, d, buf).(*Relation)
	clear(buf)
	mustDecode(t, d, fixBegin)

	buf = bytes.Clone(fixInsert)
	ins := mustDecode(t, d, buf).(*Insert)
	for i := range buf {
		buf[i] = 0xa5
	}

	msgBuf := bytes.Clone(fixMessage)
	msg := mustDecode(t, d, msgBuf).(*Message)
	for i := range msgBuf {
		msgBuf[i] = 0xa5
	}

	if !reflect.DeepEqual(rel, fixRelationWant()) {
		t.Errorf("relation changed with its input: %#v", rel)
	}
	wantValues := []Value{
		{Kind: KindText, Data: []byte("42")},
		{Kind: KindText, Data: []byte("order-7")},
		{Kind: KindText, Data: []byte(`{"a": 1}`)},
		{Kind: KindNull},
	}
	if !reflect.DeepEqual(ins.Values, wantValues) {
		t.Errorf("insert values changed with their input: %q", ins.Values)
	}
	if msg.Prefix != "walbox" || string(msg.Content) != "hi" {
		t.Errorf("message changed with its input: prefix %q content %q", msg.Prefix, msg.Content)
	}
}

// Values share one backing array; appending to one must not overwrite the
// next (each Data is capped at its own length).
func TestInsertValuesDoNotOverlap(t *testing.T) {
	d := openTx(t)
	ins := mustDecode(t, d, fixInsert).(*Insert)
	_ = append(ins.Values[0].Data, "XXXXXXXX"...)
	if got := string(ins.Values[1].Data); got != "order-7" {
		t.Fatalf("appending to value 0 overwrote value 1: %q", got)
	}
}

// Tables wider than smallTuple take the separate-allocation path.
func TestDecodeInsertWideTable(t *testing.T) {
	for _, n := range []int{0, 1, smallTuple, smallTuple + 1, 300} {
		rel := &Relation{ID: 77, Namespace: "public", Name: "wide", Columns: make([]Column, n)}
		values := make([]Value, n)
		for i := range rel.Columns {
			rel.Columns[i] = Column{Name: fmt.Sprintf("c%d", i), TypeOID: TextOID, TypeModifier: -1}
			values[i] = Value{Kind: KindText, Data: []byte(fmt.Sprint(i))}
		}
		d := New()
		mustDecode(t, d, relationMsg(rel))
		mustDecode(t, d, fixBegin)
		ins := mustDecode(t, d, insertMsg(77, values)).(*Insert)
		if !reflect.DeepEqual(ins.Values, values) {
			t.Errorf("%d columns: values %q, want %q", n, ins.Values, values)
		}
		if cap(ins.Values) != n {
			t.Errorf("%d columns: cap(Values) = %d, want %d", n, cap(ins.Values), n)
		}
	}
}
