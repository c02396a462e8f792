package schemareg

import (
	"bytes"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
)

func TestHeader(t *testing.T) {
	tests := []struct {
		name  string
		id    uint32
		index []int
		want  []byte
	}{
		// magic, id big-endian
		{name: "avro", id: 1, want: []byte{0, 0, 0, 0, 1}},
		{name: "large id", id: 0x01020304, want: []byte{0, 1, 2, 3, 4}},
		// then the index list: [0] is the single byte 0
		{name: "first message", id: 7, index: []int{0}, want: []byte{0, 0, 0, 0, 7, 0}},
		// else zigzag varints: the count 1 -> 2, index 3 -> 6
		{name: "fourth message", id: 7, index: []int{3}, want: []byte{0, 0, 0, 0, 7, 2, 6}},
		// count 2 -> 4, 1 -> 2, 0 -> 0
		{name: "nested", id: 7, index: []int{1, 0}, want: []byte{0, 0, 0, 0, 7, 4, 2, 0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := AppendHeader(nil, tt.id, tt.index)
			if !bytes.Equal(got, tt.want) {
				t.Fatalf("AppendHeader = %v, want %v", got, tt.want)
			}
			// franz-go's serializer writes the same bytes.
			ref, _ := new(sr.ConfluentHeader).AppendEncode(nil, int(tt.id), tt.index)
			if !bytes.Equal(got, ref) {
				t.Errorf("sr.ConfluentHeader writes %v", ref)
			}
			id, body, err := ParseHeader(append(got, 0xAA))
			if err != nil || id != tt.id {
				t.Fatalf("ParseHeader: %d, %v", id, err)
			}
			if tt.index == nil {
				return
			}
			index, msg, err := ParseIndex(body)
			if err != nil || !slices.Equal(index, tt.index) || !bytes.Equal(msg, []byte{0xAA}) {
				t.Errorf("ParseIndex = %v, %v, %v", index, msg, err)
			}
		})
	}
}

func TestParseHeaderRejects(t *testing.T) {
	for _, b := range [][]byte{nil, {0}, {0, 0, 0, 1}, {1, 0, 0, 0, 1}, []byte(`{"id":1}`)} {
		if _, _, err := ParseHeader(b); !errors.Is(err, ErrBadHeader) {
			t.Errorf("ParseHeader(%v) = %v, want ErrBadHeader", b, err)
		}
	}
	for _, b := range [][]byte{
		nil,      // no length
		{0x80},   // truncated varint
		{1},      // negative count (zigzag -1)
		{130, 1}, // count 65: over the bound
		{0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f}, // a forged huge count
		{4, 2}, // two entries, one given
		{2, 1}, // a negative index
	} {
		if _, _, err := ParseIndex(b); !errors.Is(err, ErrBadHeader) {
			t.Errorf("ParseIndex(%v) = %v, want ErrBadHeader", b, err)
		}
	}
}

// FuzzParseHeader: the parsers never panic, never allocate past their bound,
// and what they accept writes back to the same bytes.
func FuzzParseHeader(f *testing.F) {
	f.Add([]byte{0, 0, 0, 0, 1, 0, 0xAA})
	f.Add([]byte{0, 0, 0, 0, 7, 4, 2, 0})
	f.Add([]byte{0, 0, 0, 0, 7, 0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		id, body, err := ParseHeader(b)
		if err != nil {
			return
		}
		index, msg, err := ParseIndex(body)
		if err != nil {
			return
		}
		if len(index) > maxIndexDepth {
			t.Fatalf("index of %d entries", len(index))
		}
		again := append(AppendHeader(nil, id, index), msg...)
		if len(again) > len(b) {
			t.Fatalf("re-encoded %v is longer than the input %v", again, b)
		}
		id2, body2, _ := ParseHeader(again)
		index2, msg2, err := ParseIndex(body2)
		if err != nil || id2 != id || !slices.Equal(index, index2) || !bytes.Equal(msg, msg2) {
			t.Fatalf("round trip of %v: %d %v %v, want %d %v %v", b, id2, index2, msg2, id, index, msg)
		}
	})
}
