package decoder

import (
	"github.com/jackc/pglogrepl"
)

// Replica identity settings (pg_class.relreplident) a Relation message may
// carry. Any other byte means the message is garbled.
const (
	replicaIdentityDefault = 'd'
	replicaIdentityNothing = 'n'
	replicaIdentityFull    = 'f'
	replicaIdentityIndex   = 'i'
)

// columnFlagKey marks a column as part of the replica identity. Other flag
// bits are ignored: none are defined, and a future one should not stop the
// pipeline.
const columnFlagKey = 1

// decodeRelation parses
//
//	Byte1('R') Int32 relation OID, String namespace, String name,
//	Int8 replica identity, Int16 column count, then per column:
//	Int8 flags, String name, Int32 type OID, Int32 type modifier
//
// and replaces the cached entry with a fresh *Relation, so Inserts decoded
// before a schema change keep describing their own columns.
func (d *Decoder) decodeRelation(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	malformed := func(format string, args ...any) (Decoded, error) {
		return nil, newError(walStart, msgRelation, ErrMalformed, format, args...)
	}
	if len(data) < 1+4 {
		return malformed("length %d, too short for the relation OID", len(data))
	}
	rel := &Relation{ID: be32(data[1:])}
	off := 5
	var ok bool
	if rel.Namespace, off, ok = cstring(data, off); !ok {
		return malformed("relation %d: namespace is not NUL-terminated", rel.ID)
	}
	if rel.Namespace == "" {
		// pgoutput abbreviates pg_catalog to an empty string to save space.
		rel.Namespace = "pg_catalog"
	}
	if rel.Name, off, ok = cstring(data, off); !ok {
		return malformed("relation %d: name is not NUL-terminated", rel.ID)
	}
	if len(data)-off < 1+2 {
		return malformed("relation %s: truncated before the column count", rel.QualifiedName())
	}
	switch ri := data[off]; ri {
	case replicaIdentityDefault, replicaIdentityNothing, replicaIdentityFull, replicaIdentityIndex:
	default:
		return malformed("relation %s: replica identity %q is none of d, n, f, i", rel.QualifiedName(), ri)
	}
	n := int(be16(data[off+1:]))
	off += 3
	// Check the announced count against the bytes present before allocating:
	// a garbled count must not turn into a large allocation or a panic.
	if n*minRelationColumnLen > len(data)-off {
		return malformed("relation %s announces %d columns but only %d bytes follow",
			rel.QualifiedName(), n, len(data)-off)
	}
	rel.Columns = make([]Column, n)
	for i := range rel.Columns {
		c := &rel.Columns[i]
		if off >= len(data) {
			return malformed("relation %s: truncated at column %d of %d", rel.QualifiedName(), i, n)
		}
		c.Key = data[off]&columnFlagKey != 0
		if c.Name, off, ok = cstring(data, off+1); !ok {
			return malformed("relation %s: column %d name is not NUL-terminated", rel.QualifiedName(), i)
		}
		if len(data)-off < 8 {
			return malformed("relation %s: column %q truncated before its type", rel.QualifiedName(), c.Name)
		}
		c.TypeOID = be32(data[off:])
		c.TypeModifier = int32(be32(data[off+4:]))
		off += 8
	}
	if off != len(data) {
		return malformed("relation %s: %d trailing bytes after %d columns", rel.QualifiedName(), len(data)-off, n)
	}
	if d.relations == nil { // zero Decoder
		d.relations = make(map[uint32]*Relation)
	}
	d.relations[rel.ID] = rel
	d.last = rel
	return rel, nil
}
