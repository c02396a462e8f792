package slotctl

import (
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// Sentinel errors. Returned errors wrap one (sometimes several, joined) of
// them with the values involved and what to do about it.
var (
	// ErrInvalidConfig: a table, slot or publication name is malformed.
	ErrInvalidConfig = errors.New("slotctl: invalid configuration")

	// ErrUnsupportedVersion: the server is older than PostgreSQL 14.
	ErrUnsupportedVersion = errors.New("slotctl: unsupported PostgreSQL version")
	// ErrWALLevel: wal_level is not logical, so no logical slot can exist.
	ErrWALLevel = errors.New("slotctl: wal_level is not logical")
	// ErrNoReplicationPrivilege: the role is neither superuser nor REPLICATION.
	ErrNoReplicationPrivilege = errors.New("slotctl: role may not use replication")
	// ErrNoReplicationSlots: max_replication_slots or max_wal_senders is 0,
	// or every slot is taken.
	ErrNoReplicationSlots = errors.New("slotctl: no replication slot available")
	// ErrTableNotFound: the outbox table does not exist (or is not a table).
	ErrTableNotFound = errors.New("slotctl: outbox table not found")
	// ErrTableNotReadable: the role lacks SELECT on the table or USAGE on
	// its schema.
	ErrTableNotReadable = errors.New("slotctl: outbox table not readable")

	// ErrPublicationNotFound: the publication does not exist and
	// Config.CreateMissing is false (or DropPublication found nothing).
	ErrPublicationNotFound = errors.New("slotctl: publication not found")
	// ErrPublicationMismatch: the publication exists but does not publish
	// exactly the outbox table's inserts.
	ErrPublicationMismatch = errors.New("slotctl: publication does not match the outbox table")
	// ErrPublicationPrivilege: the role may not create or drop the
	// publication (it must own the table, or the publication).
	ErrPublicationPrivilege = errors.New("slotctl: not allowed to manage the publication")

	// ErrSlotNotFound: the slot does not exist (and Config.CreateMissing is
	// false, where it applies).
	ErrSlotNotFound = errors.New("slotctl: replication slot not found")
	// ErrSlotExists: CreateSlot found a slot of that name.
	ErrSlotExists = errors.New("slotctl: replication slot already exists")
	// ErrSlotMismatch: the slot exists but is physical, temporary, uses
	// another output plugin, or belongs to another database.
	ErrSlotMismatch = errors.New("slotctl: replication slot does not match")
	// ErrSlotLost: the server removed WAL the slot still needed
	// (wal_status = lost); events committed meanwhile may never be streamed.
	ErrSlotLost = errors.New("slotctl: replication slot lost its WAL")
	// ErrSlotActive: a process is streaming from the slot, so it cannot be
	// dropped.
	ErrSlotActive = errors.New("slotctl: replication slot is in use")
	// ErrSlotVanished: under Config.CreateOnFirstStart, the slot is missing
	// although this is not a first start (the publication exists and does
	// not carry walbox's pending marker for the slot). The slot was probably
	// lost in a failover or dropped; events committed since its last
	// position were not streamed. Nothing is created.
	ErrSlotVanished = errors.New("slotctl: replication slot vanished")
	// ErrNotTrailing: a slot named as walbox's trailing replay slot was
	// not made by walbox (see CheckTrailing): it was decoded by a client,
	// or it is ahead of the live slot. walbox does not adopt it, since
	// advancing it would skip its consumer's events.
	ErrNotTrailing = errors.New("slotctl: not walbox's trailing slot")

	// ErrEmitMessagePublic: PUBLIC may execute pg_logical_emit_message, so
	// with message routing on any database role can emit events. Apply
	// migrations/004_emit_message_privilege.sql.
	ErrEmitMessagePublic = errors.New("slotctl: PUBLIC may execute pg_logical_emit_message")
)

// SQLSTATE codes slotctl reacts to.
const (
	codeInsufficientPrivilege = "42501" // may not create/drop: not owner, no REPLICATION
	codeUndefinedObject       = "42704" // publication or slot does not exist
	codeDuplicateObject       = "42710" // publication or slot exists (a concurrent create)
	codeUniqueViolation       = "23505" // a concurrent CREATE PUBLICATION of the same name, caught by the catalog's unique index
	codeUndefinedTable        = "42P01" // the outbox table is gone
	codeObjectInUse           = "55006" // slot active in another process
	codeConfigLimitExceeded   = "53400" // all replication slots in use
	codePrerequisiteState     = "55000" // e.g. wal_level < logical for a logical slot
)

// sqlState returns the SQLSTATE of a server error, or "".
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
