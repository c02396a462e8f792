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
// breaks streaming.
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
