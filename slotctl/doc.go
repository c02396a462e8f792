// Package slotctl prepares and inspects the Postgres side of walbox: the
// preflight checks, the publication over the outbox table and the pgoutput
// logical replication slot. `walbox run` calls it on start; the slotctl
// command wraps it for operators.
//
// Order matters. Create the publication before the slot (Ensure does):
// pgoutput reads the publication through the catalog as it was when each
// change was written, so a slot whose start precedes the publication fails
// with "publication does not exist" on the first change it decodes. For the
// same reason, dropping and recreating the publication under a live slot
// breaks streaming: EnsurePublication never creates a publication while the
// slot exists, and advises a new publication with a new slot instead.
//
// A missing slot is not simply created again: a new slot streams only what
// commits after its creation, so replacing a slot lost in a failover or
// dropped by someone skips every event committed since. Config's
// CreateOnFirstStart (what `walbox run` uses) creates the slot only on a
// first start, recognised by the pending marker that a publication created
// by slotctl carries until its slot exists (see PendingMarker); otherwise
// ErrSlotVanished says what probably happened and how to recover.
// CreateMissing (`slotctl create`, `walbox run --create-slot`) creates
// whatever is missing.
//
// A new slot never streams the rows already in the outbox table:
// ExistingRows counts them (bounded) before a slot is created, and Setup and
// `slotctl create` warn with TableRows.UnsentWarning.
//
// Setup is the retrying entry point of `walbox run`; CheckEmitMessagePrivilege
// guards message routing (--message-prefix) against forged events.
//
// For operators, List shows every logical slot of the database (walbox's
// live and trailing replay slots marked), Advance moves a slot forward
// (refusing backwards and an active slot), CopySlot copies one, and
// CountEvents counts the events a move or a drop would skip, on a temporary
// copy that the server drops with its session.
//
// Every function takes a connection with an ordinary (non-replication)
// session, a *pgx.Conn or anything else satisfying Querier. Identifiers are
// validated by Config.Validate and always quoted with pgx.Identifier before
// they reach SQL; names are taken as stored in the catalog (case-sensitive,
// unquoted).
//
// Errors wrap the sentinels of errors.go with the values involved and the
// fix; check them with errors.Is. Functions are safe for concurrent use with
// distinct connections (a *pgx.Conn itself is not).
package slotctl
