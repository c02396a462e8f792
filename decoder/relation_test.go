package decoder

import (
	"errors"
	"reflect"
	"testing"
)

func TestDecodeRelation(t *testing.T) {
	tests := []struct {
		name    string
		in      []byte
		want    *Relation
		wantErr error
	}{
		{
			name: "fixture",
			in:   fixRelation,
			want: fixRelationWant(),
		},
		{
			name: "no columns, pg_catalog namespace abbreviated",
			in: cat(
				[]byte{'R'},                    // Byte1('R')
				[]byte{0x00, 0x00, 0x00, 0x07}, // Int32: relation OID 7
				[]byte("\x00"),                 // String: "" = pg_catalog
				[]byte("t\x00"),                // String: name
				[]byte{'n'},                    // Int8: replica identity nothing
				[]byte{0x00, 0x00},             // Int16: 0 columns
			),
			want: &Relation{ID: 7, Namespace: "pg_catalog", Name: "t", Columns: []Column{}},
		},
		{
			// Only bit 0 (key) is defined; other bits must not stop us.
			name: "replica identity full, unknown flag bits",
			in: cat(
				[]byte{'R'},
				[]byte{0x00, 0x00, 0x00, 0x08}, // Int32: relation OID 8
				[]byte("s\x00"),                // String: namespace
				[]byte("t\x00"),                // String: name
				[]byte{'f'},                    // Int8: replica identity full
				[]byte{0x00, 0x01},             // Int16: 1 column
				[]byte{0x81},                   // Int8: flags, key + an unknown bit
				[]byte("c\x00"),                // String: column name
				[]byte{0x00, 0x00, 0x00, 0x11}, // Int32: type OID 17 (bytea)
				[]byte{0x00, 0x00, 0x00, 0x24}, // Int32: type modifier 36
			),
			want: &Relation{ID: 8, Namespace: "s", Name: "t", Columns: []Column{
				{Name: "c", TypeOID: ByteaOID, TypeModifier: 36, Key: true},
			}},
		},
		{
			name:    "only the type byte",
			in:      []byte{'R'},
			wantErr: ErrMalformed,
		},
		{
			name:    "namespace not terminated",
			in:      cat([]byte{'R', 0, 0, 0x40, 0x01}, []byte("public")),
			wantErr: ErrMalformed,
		},
		{
			name:    "name not terminated",
			in:      cat([]byte{'R', 0, 0, 0x40, 0x01}, []byte("public\x00outbox")),
			wantErr: ErrMalformed,
		},
		{
			name:    "truncated before the column count",
			in:      cat([]byte{'R', 0, 0, 0x40, 0x01}, []byte("public\x00outbox\x00d")),
			wantErr: ErrMalformed,
		},
		{
			name:    "unknown replica identity",
			in:      cat([]byte{'R', 0, 0, 0x40, 0x01}, []byte("public\x00outbox\x00x"), []byte{0, 0}),
			wantErr: ErrMalformed,
		},
		{
			// pglogrepl.Parse panics on this one: it trusts the count.
			name: "announces more columns than it carries",
			in: cat(
				[]byte{'R', 0, 0, 0x40, 0x01},
				[]byte("public\x00outbox\x00d"),
				[]byte{0xff, 0xff}, // Int16: 65535 columns, none follow
			),
			wantErr: ErrMalformed,
		},
		{
			name:    "last column's type modifier truncated",
			in:      fixRelation[:len(fixRelation)-2],
			wantErr: ErrMalformed,
		},
		{
			name: "column name not terminated",
			in: cat(
				[]byte{'R', 0, 0, 0x40, 0x01},
				[]byte("public\x00outbox\x00d"),
				[]byte{0x00, 0x01},           // Int16: 1 column
				[]byte{0x00},                 // Int8: flags
				[]byte("a_long_column_name"), // no NUL, long enough to pass the size estimate
			),
			wantErr: ErrMalformed,
		},
		{
			name:    "trailing bytes after the columns",
			in:      cat(fixRelation, []byte{0}),
			wantErr: ErrMalformed,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New()
			got, err := d.Decode(fixCommitLSN, tt.in)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("err = %v, want %v", err, tt.wantErr)
				}
				if got != nil {
					t.Errorf("result %#v alongside an error", got)
				}
				if len(d.relations) != 0 {
					t.Errorf("failed Decode cached %d relations", len(d.relations))
				}
				return
			}
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("got %#v, want %#v", got, tt.want)
			}
			if d.relations[tt.want.ID] != got {
				t.Error("decoded relation is not the cached one")
			}
		})
	}
}

// A schema change re-sends the Relation. Inserts decoded before it must keep
// describing the old columns, so the cache gets a fresh *Relation instead of
// an edited one.
func TestRelationRedefinitionKeepsEarlierPointers(t *testing.T) {
	d := openTx(t)
	before := mustDecode(t, d, fixInsert).(*Insert)

	changed := fixRelationWant()
	changed.Columns = append(changed.Columns, Column{Name: "headers", TypeOID: JSONBOID, TypeModifier: -1})
	rel := mustDecode(t, d, relationMsg(changed)).(*Relation)
	if rel == before.Relation {
		t.Fatal("Relation message returned the old pointer")
	}
	if !reflect.DeepEqual(before.Relation, fixRelationWant()) {
		t.Errorf("earlier Insert's relation changed to %#v", before.Relation)
	}

	// The old 4-column tuple no longer fits the 5-column relation.
	if _, err := d.Decode(0, fixInsert); !errors.Is(err, ErrProtocol) {
		t.Fatalf("4-column insert after redefinition: err = %v, want ErrProtocol", err)
	}
	after := mustDecode(t, d, insertMsg(fixRelID, []Value{
		{Kind: KindText, Data: []byte("43")}, {Kind: KindNull}, {Kind: KindNull}, {Kind: KindNull},
		{Kind: KindText, Data: []byte("{}")},
	})).(*Insert)
	if after.Relation != rel {
		t.Error("Insert after redefinition does not point at the new relation")
	}
}

// The one-entry lookup cache must follow a second table and back.
func TestInsertAlternatingRelations(t *testing.T) {
	d := openTx(t)
	other := &Relation{ID: 99, Namespace: "public", Name: "other", Columns: []Column{{Name: "x", TypeOID: TextOID, TypeModifier: -1}}}
	mustDecode(t, d, relationMsg(other))
	for i, tc := range []struct {
		msg  []byte
		want string
	}{
		{fixInsert, "public.outbox"},
		{insertMsg(99, []Value{{Kind: KindText, Data: []byte("v")}}), "public.other"},
		{fixInsert, "public.outbox"},
		{insertMsg(99, []Value{{Kind: KindNull}}), "public.other"},
	} {
		ins := mustDecode(t, d, tc.msg).(*Insert)
		if got := ins.Relation.QualifiedName(); got != tc.want {
			t.Errorf("insert %d: relation %s, want %s", i, got, tc.want)
		}
	}
}

func TestResetForgetsRelationsAndTransaction(t *testing.T) {
	d := openTx(t)
	rel := d.relations[fixRelID]
	d.Reset()
	if d.InTransaction() {
		t.Error("InTransaction() = true after Reset")
	}
	mustDecode(t, d, fixBegin)
	if _, err := d.Decode(0, fixInsert); !errors.Is(err, ErrUnknownRelation) {
		t.Fatalf("Insert after Reset: err = %v, want ErrUnknownRelation", err)
	}
	if !reflect.DeepEqual(rel, fixRelationWant()) {
		t.Error("Reset altered a relation already handed out")
	}
}

// The zero Decoder works without New.
func TestZeroDecoder(t *testing.T) {
	var d Decoder
	for _, m := range [][]byte{fixRelation, fixBegin, fixInsert, fixCommit} {
		if _, err := d.Decode(0, m); err != nil {
			t.Fatalf("Decode(%q): %v", m[:1], err)
		}
	}
}
