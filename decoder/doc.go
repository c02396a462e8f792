// Package decoder turns the messages of Postgres' pgoutput logical decoding
// plugin (protocol version 1, and the stream messages of versions 2 to 4)
// into walbox events: transaction boundaries,
// inserted rows, relation descriptions and logical decoding messages.
//
// # Why a guarded parser of its own
//
// The bytes come from the network, and a decoder that panics takes the
// replication loop down without telling it which position was bad.
// pglogrepl.Parse indexes into the message without length checks (an empty
// message, a truncated tuple, a Relation announcing more columns than it
// carries or a logical message with a huge length all panic), so this package
// parses the few message kinds walbox needs itself. Every length is checked
// against the bytes present before it is used, a message must end exactly
// where its layout says, and a recover in Decode turns any panic that slipped
// through into ErrMalformed. FuzzDecode checks that no input reaches that
// recover. A message that cannot be decoded is an error, never skipped: the
// pipeline must stop before confirming its LSN, or the events in it are lost.
//
// # Copy semantics
//
// XLogData.WALData points into pgproto3's read buffer, which the next receive
// overwrites. Everything Decode returns is therefore owned: column values and
// message contents are copied (all values of a row share one allocation) and
// strings are fresh. A result may be handed to an asynchronous producer or
// kept in a map without further copying.
//
// # Relation cache and transaction state
//
// An Insert names its table only by OID; the column names and types come from
// the Relation message the server sends before a table's first change in a
// walsender session and again after its definition changes. The Decoder caches
// them and points each Insert at the *Relation in force when it was decoded; a
// new Relation message replaces the cache entry with a fresh value rather than
// editing the old one. After a reconnect call Reset: the new session re-sends
// Relation messages, and a cache from the old one could describe a table that
// has since changed.
//
// The Decoder also tracks the open transaction, so every Insert and
// transactional Message carries its XID, commit LSN and commit time, and it
// rejects out-of-order streams (ErrProtocol) rather than guess which
// transaction a change belongs to: commit positions are what walbox confirms
// to the server.
//
// Only inserts are decoded: Update, Delete, Truncate, Type and Origin messages
// come back as *Ignored. Two-phase messages are refused, since walbox never
// enables them.
//
// # Streamed transactions
//
// With SetStreaming (a session started with proto_version 2 to 4 and
// streaming 'on' or 'parallel') the Decoder also reads Stream Start, Stop,
// Commit and Abort. Between Stream Start and Stop every message carries the
// xid of the (sub)transaction that made it; the Decoder checks the framing
// and returns it as a *StreamChange holding the message without that xid,
// undecoded: it belongs to a transaction that may still roll back, and the
// relation it refers to may only be described later in the same stream.
// The caller keeps the changes and, after StreamCommit, decodes them between
// BeginStreamed and CommitStreamed with Decode, exactly as if protocol
// version 1 had sent the transaction.
package decoder
