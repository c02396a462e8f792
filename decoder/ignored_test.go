package decoder

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestDecodeIgnoredAndRefused(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    Decoded
		wantErr error
	}{
		{
			name: "update",
			in: cat(
				[]byte{'U'},                    // Byte1('U'): Update
				[]byte{0x00, 0x00, 0x40, 0x01}, // Int32: relation OID
				[]byte{'N'},                    // Byte1('N'): new tuple
				[]byte{0x00, 0x00},             // Int16: 0 columns
			),
			want: &Ignored{Kind: 'U'},
		},
		{name: "delete", in: []byte{'D', 0, 0, 0x40, 0x01, 'K', 0, 0}, want: &Ignored{Kind: 'D'}},
		{
			name: "truncate",
			in: cat(
				[]byte{'T'},                    // Byte1('T'): Truncate
				[]byte{0x00, 0x00, 0x00, 0x01}, // Int32: 1 relation
				[]byte{0x00},                   // Int8: options
				[]byte{0x00, 0x00, 0x40, 0x01}, // Int32: relation OID
			),
			want: &Ignored{Kind: 'T'},
		},
		{
			name: "type",
			in: cat(
				[]byte{'Y'},                    // Byte1('Y'): Type
				[]byte{0x00, 0x00, 0x40, 0x10}, // Int32: type OID
				[]byte("public\x00"),           // String: namespace
				[]byte("mood\x00"),             // String: type name
			),
			want: &Ignored{Kind: 'Y'},
		},
		{
			name: "origin",
			in: cat(
				[]byte{'O'},                    // Byte1('O'): Origin
				[]byte{0, 0, 0, 0, 0, 0, 0, 1}, // Int64: origin commit LSN
				[]byte("upstream\x00"),         // String: origin name
			),
			want: &Ignored{Kind: 'O'},
		},
		{name: "stream start", in: []byte{'S', 0, 0, 0x02, 0xee, 1}, wantErr: ErrStreamingUnsupported},
		{name: "stream stop", in: []byte{'E'}, wantErr: ErrStreamingUnsupported},
		{name: "stream commit", in: []byte{'c', 0, 0, 0x02, 0xee}, wantErr: ErrStreamingUnsupported},
		{name: "stream abort", in: []byte{'A', 0, 0, 0x02, 0xee, 0, 0, 0x02, 0xee}, wantErr: ErrStreamingUnsupported},
		{name: "two-phase begin prepare", in: []byte{'b', 0}, wantErr: ErrUnknownMessage},
		{name: "NUL type byte", in: []byte{0}, wantErr: ErrUnknownMessage},
		{name: "empty", in: []byte{}, wantErr: ErrMalformed},
		{name: "nil", in: nil, wantErr: ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := New().Decode(fixCommitLSN, tt.in)
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
		})
	}
}

// The streaming error must tell the operator what walbox expects.
func TestStreamingErrorExplains(t *testing.T) {
	_, err := New().Decode(fixCommitLSN, []byte{'S', 0, 0, 0x02, 0xee, 1})
	for _, want := range []string{"proto_version 1", "streaming", "0/16B3748", "Stream Start ('S')"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

// TestDecodeIgnoredNamesRelation: Update and Delete carry the relation
// they change once it is known, so the pipeline can apply a policy to
// UPDATEs of the outbox; an unknown relation or a message too short to
// name one gives none, as before.
func TestDecodeIgnoredNamesRelation(t *testing.T) {
	d := New()
	if _, err := d.Decode(fixCommitLSN, fixRelation); err != nil {
		t.Fatal(err)
	}
	rel := fixRelationWant()
	tests := []struct {
		name    string
		in      []byte
		wantRel bool
	}{
		{"update of a known relation", wire{'U'}.u32(rel.ID).u8('N').u16(0), true},
		{"delete of a known relation", wire{'D'}.u32(rel.ID).u8('K').u16(0), true},
		{"update of an unknown relation", wire{'U'}.u32(rel.ID + 1).u8('N').u16(0), false},
		{"update too short to name one", []byte{'U', 0, 0}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := d.Decode(fixCommitLSN, tt.in)
			if err != nil {
				t.Fatal(err)
			}
			ig, ok := got.(*Ignored)
			if !ok {
				t.Fatalf("got %T, want *Ignored", got)
			}
			if (ig.Relation != nil) != tt.wantRel {
				t.Fatalf("Relation = %v, want one: %v", ig.Relation, tt.wantRel)
			}
			if tt.wantRel && ig.Relation.QualifiedName() != rel.QualifiedName() {
				t.Errorf("Relation %s, want %s", ig.Relation.QualifiedName(), rel.QualifiedName())
			}
		})
	}
}
