package decoder

import (
	"fmt"

	"github.com/jackc/pglogrepl"
)

// tupleNew is the Byte1('N') that introduces the new tuple of an Insert.
const tupleNew = 'N'

// decodeInsert parses
//
//	Byte1('I') Int32 relation OID, Byte1('N'), TupleData
//	TupleData: Int16 column count, then per column Byte1 kind
//	           ('n' null, 'u' unchanged toast, 't' text, 'b' binary),
//	           and for 't'/'b' Int32 length + Byte[n] value
//
// This is the hot path. It validates the whole tuple in a first pass that
// allocates nothing, then makes two allocations for tables of up to
// smallTuple columns (three beyond): the Insert together with its Values, and
// one backing array holding all column data. Each Value.Data is a capped
// sub-slice of that array, so appending to one cannot overwrite its neighbour.
func (d *Decoder) decodeInsert(walStart pglogrepl.LSN, data []byte) (Decoded, error) {
	if len(data) < insertHeaderLen {
		return nil, newError(walStart, msgInsert, ErrMalformed,
			"length %d, want at least %d", len(data), insertHeaderLen)
	}
	relID := be32(data[1:])
	if data[5] != tupleNew {
		return nil, newError(walStart, msgInsert, ErrMalformed,
			"relation %d: tuple marker %q, want 'N'", relID, data[5])
	}
	if !d.inTx {
		return nil, newError(walStart, msgInsert, ErrProtocol, "insert into relation %d outside a transaction", relID)
	}
	rel := d.last
	if rel == nil || rel.ID != relID {
		rel = d.relations[relID]
		if rel == nil {
			return nil, newError(walStart, msgInsert, ErrUnknownRelation,
				"relation OID %d (the decoder must see every message since START_REPLICATION; "+
					"was it Reset mid-session or a message skipped?)", relID)
		}
		d.last = rel
	}
	n := int(be16(data[6:]))
	if n != len(rel.Columns) {
		return nil, newError(walStart, msgInsert, ErrProtocol,
			"tuple has %d columns but Relation %s announced %d", n, rel.QualifiedName(), len(rel.Columns))
	}

	// Pass 1: validate every column and size the data.
	total, err := scanTuple(data, insertHeaderLen, n)
	if err != nil {
		return nil, newError(walStart, msgInsert, ErrMalformed, "relation %s: %v", rel.QualifiedName(), err)
	}

	// Pass 2: copy. Bounds are proven by pass 1.
	// make with total 0 does not allocate but still returns a non-nil slice,
	// so an empty text value is never confused with a NULL (Data nil).
	backing := make([]byte, total)
	var ins *Insert
	var values []Value
	if n <= smallTuple {
		blk := new(insertBlock)
		ins, values = &blk.ins, blk.vals[:n:n]
	} else {
		ins, values = new(Insert), make([]Value, n)
	}
	off, pos := insertHeaderLen, 0
	for i := range values {
		kind := data[off]
		off++
		switch kind {
		case colNull:
			values[i].Kind = KindNull
		case colUnchanged:
			values[i].Kind = KindUnchangedToast
		default: // colText or colBinary, as pass 1 checked
			if kind == colText {
				values[i].Kind = KindText
			} else {
				values[i].Kind = KindBinary
			}
			l := int(be32(data[off:]))
			off += 4
			copy(backing[pos:], data[off:off+l])
			values[i].Data = backing[pos : pos+l : pos+l]
			pos += l
			off += l
		}
	}
	*ins = Insert{
		XID:        d.xid,
		CommitLSN:  d.commitLSN,
		CommitTime: d.commitTime,
		LSN:        walStart,
		Relation:   rel,
		Values:     values,
	}
	return ins, nil
}

// smallTuple is the most columns whose Values share the Insert's allocation.
// Outbox tables have 5 to 10 columns; 10 Values keep the block within one
// 416-byte size class.
const smallTuple = 10

// insertBlock lets an Insert and its Values be one allocation instead of two.
// The Insert points into the block, so the Values live exactly as long as it.
type insertBlock struct {
	ins  Insert
	vals [smallTuple]Value
}

// scanTuple checks the n columns of a TupleData starting at off and returns
// the total number of value bytes. The tuple must end exactly at the end of
// data: pgoutput sends nothing after it, so extra bytes mean misframing.
// The error carries only the detail; the caller wraps it in ErrMalformed.
func scanTuple(data []byte, off, n int) (int, error) {
	total := 0
	for i := 0; i < n; i++ {
		if off >= len(data) {
			return 0, fmt.Errorf("truncated at column %d of %d", i, n)
		}
		kind := data[off]
		off++
		switch kind {
		case colNull, colUnchanged:
		case colText, colBinary:
			if len(data)-off < 4 {
				return 0, fmt.Errorf("truncated at column %d of %d", i, n)
			}
			// Compare as int64 so neither a negative int32 length nor one
			// near 4 GiB can wrap around the check.
			l := int64(int32(be32(data[off:])))
			off += 4
			if l < 0 || l > int64(len(data)-off) {
				return 0, fmt.Errorf("column %d: length %d overruns the %d bytes left", i, l, len(data)-off)
			}
			off += int(l)
			total += int(l)
		default:
			return 0, fmt.Errorf("column %d: unknown tuple column kind %q", i, kind)
		}
	}
	if off != len(data) {
		return 0, fmt.Errorf("%d trailing bytes after the tuple", len(data)-off)
	}
	return total, nil
}
