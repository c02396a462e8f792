package decoder

import (
	"time"

	"github.com/jackc/pglogrepl"
)

// ValueKind says how a column arrived in a pgoutput tuple. Postgres
// distinguishes SQL NULL from an unchanged TOASTed value it chose not to send,
// and a router must never mistake one for the other.
type ValueKind uint8

const (
	// KindNull is SQL NULL ('n').
	KindNull ValueKind = iota
	// KindUnchangedToast is a TOASTed value the server did not send ('u').
	// It cannot occur in an INSERT, but a malformed or future stream may carry it.
	KindUnchangedToast
	// KindText is a value in the type's text output form ('t').
	KindText
	// KindBinary is a value in the type's binary send form ('b').
	KindBinary
)

// Value is one column of a decoded tuple. Data is owned by the Value: the
// decoder copies it out of the replication read buffer, which pgproto3 reuses
// on the next receive. Data is nil for KindNull and KindUnchangedToast and
// non-nil (possibly empty) for KindText and KindBinary.
type Value struct {
	Kind ValueKind
	Data []byte
}

// Column describes one column of a relation as announced by a Relation message.
type Column struct {
	Name         string
	TypeOID      uint32
	TypeModifier int32
	Key          bool // part of the replica identity
}

// Relation is the decoder's cached view of a table, keyed by its relation OID.
// Postgres sends a Relation message before the first change of a table in a
// session and again whenever its definition changes, so the cache is the only
// way to know column names and types for a tuple.
type Relation struct {
	ID        uint32
	Namespace string
	Name      string
	Columns   []Column
}

// QualifiedName returns "namespace.name".
func (r *Relation) QualifiedName() string { return r.Namespace + "." + r.Name }

// ColumnIndex returns the position of the named column, or -1.
func (r *Relation) ColumnIndex(name string) int {
	for i, c := range r.Columns {
		if c.Name == name {
			return i
		}
	}
	return -1
}

// Begin starts a transaction. CommitLSN is the LSN of the transaction's commit
// record (the server knows it because pgoutput only sends committed work).
type Begin struct {
	XID        uint32
	CommitLSN  pglogrepl.LSN
	CommitTime time.Time
}

// Commit ends a transaction. EndLSN is the position just past the commit
// record: the value a consumer confirms once everything in the transaction is
// durable downstream.
type Commit struct {
	CommitLSN  pglogrepl.LSN
	EndLSN     pglogrepl.LSN
	CommitTime time.Time
}

// Insert is one inserted row, stamped with its transaction's identity.
type Insert struct {
	XID        uint32
	CommitLSN  pglogrepl.LSN
	CommitTime time.Time
	// LSN is the WAL start position of the XLogData message that carried the row.
	LSN      pglogrepl.LSN
	Relation *Relation
	Values   []Value
}

// Message is a logical decoding message written with pg_logical_emit_message.
// Transactional messages carry the enclosing transaction's identity; others
// have XID 0 and a zero CommitLSN.
type Message struct {
	XID        uint32
	CommitLSN  pglogrepl.LSN
	CommitTime time.Time
	// LSN is the message's own WAL position as pgoutput reports it inside
	// the message (the same position the XLogData's WAL start carries).
	LSN           pglogrepl.LSN
	Transactional bool
	Prefix        string
	Content       []byte // owned copy
}

// Ignored is any pgoutput message walbox does not act on (Update, Delete,
// Truncate, Type, Origin). Kind is the one-byte message type.
type Ignored struct {
	Kind byte
	// Relation is the changed table of an Update or Delete, when the
	// message is long enough to name it and the relation is known; nil
	// otherwise. The pipeline needs it to apply a policy to UPDATEs of the
	// outbox (Debezium's table.op.invalid.behavior); nothing else of these
	// messages is parsed.
	Relation *Relation
}

// Decoded is one of *Begin, *Commit, *Insert, *Message, *Relation or *Ignored.
type Decoded interface{ decoded() }

func (*Begin) decoded()    {}
func (*Commit) decoded()   {}
func (*Insert) decoded()   {}
func (*Message) decoded()  {}
func (*Relation) decoded() {}
func (*Ignored) decoded()  {}
