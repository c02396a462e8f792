package slotctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// Plugin is the output plugin walbox decodes.
const Plugin = "pgoutput"

// SlotInfo describes a replication slot as pg_replication_slots shows it.
type SlotInfo struct {
	Name      string
	Plugin    string // output plugin; "" for a physical slot
	SlotType  string // "logical" or "physical"
	Database  string // "" for a physical slot
	Temporary bool
	// Failover is true for a failover slot (PostgreSQL 17+).
	Failover bool
	// Active is true while a process streams from the slot; ActivePID is
	// that process (a walsender), 0 when inactive.
	Active    bool
	ActivePID int
	// ConfirmedFlushLSN is the position the consumer last confirmed:
	// streaming resumes with the first transaction committing after it.
	ConfirmedFlushLSN pglogrepl.LSN
	// RestartLSN is the oldest WAL the slot keeps on the server.
	RestartLSN pglogrepl.LSN
	// WALStatus is pg_replication_slots.wal_status: "reserved" (within
	// max_wal_size), "extended" (kept beyond it for the slot), "unreserved"
	// (about to be removed at the next checkpoint) or "lost" (removed: the
	// slot is unusable, see ErrSlotLost).
	WALStatus string
	// RetainedBytes is how much WAL the slot holds back: the server's
	// current WAL position minus RestartLSN. It grows while walbox is down.
	RetainedBytes int64
	// InvalidationReason is why the server invalidated the slot
	// (PostgreSQL 17+: wal_removed, rows_removed, wal_level_insufficient,
	// idle_timeout); "" while it is valid or on older servers, where
	// WALStatus "lost" is the only sign.
	InvalidationReason string
}

// Inspect reads the slot named slot. ErrSlotNotFound if it does not exist.
func Inspect(ctx context.Context, conn Querier, slot string) (SlotInfo, error) {
	if err := ValidateSlotName(slot); err != nil {
		return SlotInfo{}, err
	}
	var (
		s                  SlotInfo
		confirmed, restart string
	)
	// On a standby (PostgreSQL 16+ allows logical slots there) the current
	// WAL position is the last replayed one. invalidation_reason exists from
	// PostgreSQL 17 on; reading it through to_jsonb keeps one query for all
	// versions.
	err := conn.QueryRow(ctx, `
SELECT slot_name::text, COALESCE(plugin::text, ''), slot_type, COALESCE(database::text, ''),
       temporary, active, COALESCE(active_pid, 0),
       COALESCE(confirmed_flush_lsn::text, ''), COALESCE(restart_lsn::text, ''),
       COALESCE(wal_status, ''),
       COALESCE(pg_wal_lsn_diff(
           CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END,
           restart_lsn), 0)::bigint,
       COALESCE(to_jsonb(s) ->> 'invalidation_reason', ''),
       COALESCE((to_jsonb(s) ->> 'failover')::boolean, false)
FROM pg_replication_slots s
WHERE slot_name = $1`, slot).Scan(&s.Name, &s.Plugin, &s.SlotType, &s.Database,
		&s.Temporary, &s.Active, &s.ActivePID, &confirmed, &restart, &s.WALStatus, &s.RetainedBytes,
		&s.InvalidationReason, &s.Failover)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("%w: slot %q does not exist; create it with `slotctl create` (or walbox run --create-slot); "+
			"a new slot streams only what commits after its creation, so if it existed before, re-publish the events committed since its last position", ErrSlotNotFound, slot)
	}
	if err != nil {
		return s, fmt.Errorf("slotctl: read slot %q: %w", slot, err)
	}
	if s.ConfirmedFlushLSN, err = parseLSN(confirmed); err != nil {
		return s, fmt.Errorf("slotctl: slot %q confirmed_flush_lsn: %w", slot, err)
	}
	if s.RestartLSN, err = parseLSN(restart); err != nil {
		return s, fmt.Errorf("slotctl: slot %q restart_lsn: %w", slot, err)
	}
	return s, nil
}

func parseLSN(s string) (pglogrepl.LSN, error) {
	if s == "" {
		return 0, nil
	}
	return pglogrepl.ParseLSN(s)
}

// EnsureSlot makes sure cfg's slot exists as a pgoutput logical slot of the
// current database and still has its WAL. A missing slot is created when
// cfg.CreateMissing (see CreateSlot); under cfg.CreateOnFirstStart only when
// cfg's publication carries the slot's PendingMarker, else ErrSlotVanished
// (the slot was probably lost: the error says how to recover); otherwise
// ErrSlotNotFound. Once the slot is found usable, the pending marker is
// removed from the publication: the first start is complete. A physical or
// temporary slot, another plugin or another database is ErrSlotMismatch;
// wal_status = lost or any invalidation is ErrSlotLost (returned with the
// SlotInfo). An active slot is not an error here: SlotInfo.Active says so,
// and streaming from it fails until its current user stops.
//
// Create the publication first (see the package doc).
func EnsureSlot(ctx context.Context, conn Querier, cfg Config) (SlotInfo, error) {
	r, err := cfg.resolve()
	if err != nil {
		return SlotInfo{}, err
	}
	version := 0
	if r.failover {
		if version, err = serverVersionNum(ctx, conn); err != nil {
			return SlotInfo{}, err
		}
		if err := failoverVersionError(version); err != nil {
			return SlotInfo{}, err
		}
	}
	s, err := Inspect(ctx, conn, r.slot)
	if errors.Is(err, ErrSlotNotFound) {
		s, err = createMissingSlot(ctx, conn, r, err)
	}
	if err != nil {
		return s, err
	}
	if err := checkSlot(ctx, conn, r, s); err != nil {
		return s, err
	}
	// Only now is the first start complete: the slot exists and is usable.
	if r.createMissing || r.firstStart {
		if err := clearPendingMarker(ctx, conn, r); err != nil {
			return s, err
		}
	}
	return s, nil
}

// checkSlot reports what makes the existing slot s unusable for r:
// ErrSlotMismatch (another kind, plugin or database, temporary, not a
// failover slot when r wants one) or ErrSlotLost.
func checkSlot(ctx context.Context, conn Querier, r resolved, s SlotInfo) error {
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()::text").Scan(&db); err != nil {
		return fmt.Errorf("slotctl: read current database: %w", err)
	}
	var diffs []string
	if s.SlotType != "logical" {
		diffs = append(diffs, fmt.Sprintf("is a %s slot, not a logical one", s.SlotType))
	} else {
		if s.Plugin != Plugin {
			diffs = append(diffs, fmt.Sprintf("uses the output plugin %q, not %q", s.Plugin, Plugin))
		}
		if s.Database != db {
			diffs = append(diffs, fmt.Sprintf("belongs to database %q, not %q (connect to that database, or use another slot)", s.Database, db))
		}
	}
	if s.Temporary {
		diffs = append(diffs, "is temporary (it vanishes with the session that created it)")
	}
	notFailover := r.failover && !s.Failover
	if notFailover && len(diffs) == 0 && PatroniScope(ctx, conn) != "" {
		// Patroni keeps its permanent slots on its replicas itself, and
		// stops doing so for a failover slot: used as it is
		// (FailoverWarnings says so).
		notFailover = false
	}
	if notFailover && len(diffs) == 0 {
		// The one difference that needs no new slot: turning failover on
		// keeps the slot's position, where dropping it would lose events.
		return fmt.Errorf("%w: slot %q is not a failover slot, so a promoted standby will not have it (--failover-slot); "+
			"turn failover on, keeping its position: stop walbox (the slot must be inactive), then run "+
			"`psql \"dbname=<database> replication=database\" -c 'ALTER_REPLICATION_SLOT %s (FAILOVER true)'` "+
			"as a role with REPLICATION (do not drop the slot: a new one would not stream what committed since its position)",
			ErrSlotMismatch, s.Name, s.Name)
	}
	if notFailover {
		diffs = append(diffs, "is not a failover slot")
	}
	if len(diffs) > 0 {
		return fmt.Errorf("%w: slot %q %s; drop it with `slotctl drop --slot %s` if nothing else uses it (a consumer of another tool may) "+
			"and create it again with `slotctl create --slot %s` (or walbox run --create-slot), or choose another slot with --slot",
			ErrSlotMismatch, s.Name, strings.Join(diffs, "; "), s.Name, s.Name)
	}
	if s.WALStatus == "lost" || s.InvalidationReason != "" {
		why := "has wal_status = lost: the server removed WAL it still needed (see max_slot_wal_keep_size)"
		if s.InvalidationReason != "" && s.InvalidationReason != "wal_removed" {
			why = fmt.Sprintf("was invalidated by the server (invalidation_reason = %s)", s.InvalidationReason)
		}
		return fmt.Errorf("%w: slot %q %s, "+
			"so outbox rows committed after %s may never be streamed. Recover: drop the slot (`slotctl drop`), create it again "+
			"(`slotctl create`, or start walbox with --create-slot), then re-publish the outbox rows created since the last event consumers received "+
			"(they are still in the outbox table for its retention period; consumers deduplicate by event id)",
			ErrSlotLost, s.Name, why, s.ConfirmedFlushLSN)
	}
	return nil
}

// failoverVersionError is ErrUnsupportedVersion when a server of version
// cannot keep failover slots, else nil.
func failoverVersionError(version int) error {
	if FeaturesFor(version).FailoverSlots {
		return nil
	}
	return fmt.Errorf("%w: failover slots need PostgreSQL 17 or newer, the server is %d; turn --failover-slot off",
		ErrUnsupportedVersion, version)
}

// createMissingSlot creates r's slot, which Inspect found missing
// (notFound), as far as r allows.
func createMissingSlot(ctx context.Context, conn Querier, r resolved, notFound error) (SlotInfo, error) {
	switch {
	case r.createMissing:
	case r.firstStart:
		if err := firstStartPending(ctx, conn, r); err != nil {
			// A concurrent first start may have created the slot and
			// cleared the marker since Inspect looked: verify theirs.
			if s, ierr := Inspect(ctx, conn, r.slot); ierr == nil {
				return s, nil
			}
			return SlotInfo{}, err
		}
	default:
		return SlotInfo{}, notFound
	}
	if scope := PatroniScope(ctx, conn); scope != "" && !r.failover {
		return SlotInfo{}, patroniCreateError(scope, r, notFound)
	}
	s, err := createSlot(ctx, conn, r.slot, r.failover)
	if errors.Is(err, ErrSlotExists) {
		// Created concurrently by another walbox: verify theirs.
		return Inspect(ctx, conn, r.slot)
	}
	return s, err
}

// CreateSlot creates a pgoutput logical replication slot named slot in the
// current database and returns it. Streaming from it starts with the first
// transaction committing after its creation: earlier outbox rows are not
// published. It waits for transactions running at the time to finish, so
// bound ctx. ErrSlotExists if the name is taken; ErrNoReplicationSlots when
// max_replication_slots are all used; ErrWALLevel, ErrNoReplicationPrivilege
// when Preflight would have said so.
func CreateSlot(ctx context.Context, conn Querier, slot string) (SlotInfo, error) {
	return createSlot(ctx, conn, slot, false)
}

func createSlot(ctx context.Context, conn Querier, slot string, failover bool) (SlotInfo, error) {
	if err := ValidateSlotName(slot); err != nil {
		return SlotInfo{}, err
	}
	sql := `SELECT pg_create_logical_replication_slot($1, $2)`
	if failover {
		// (slot_name, plugin, temporary, twophase, failover): PostgreSQL 17+.
		sql = `SELECT pg_create_logical_replication_slot($1, $2, false, false, true)`
	}
	_, err := conn.Exec(ctx, sql, slot, Plugin)
	switch sqlState(err) {
	case "":
		if err != nil {
			return SlotInfo{}, fmt.Errorf("slotctl: create slot %q: %w", slot, err)
		}
		return Inspect(ctx, conn, slot)
	case codeDuplicateObject:
		return SlotInfo{}, fmt.Errorf("%w: slot %q: %w", ErrSlotExists, slot, err)
	case codeConfigLimitExceeded:
		return SlotInfo{}, fmt.Errorf("%w: all max_replication_slots are in use; drop unused ones "+
			"(SELECT slot_name FROM pg_replication_slots WHERE NOT active) or raise max_replication_slots and restart PostgreSQL: %w",
			ErrNoReplicationSlots, err)
	case codePrerequisiteState:
		return SlotInfo{}, prerequisiteError(ctx, conn, slot, err)
	case codeInsufficientPrivilege:
		return SlotInfo{}, fmt.Errorf("%w: create slot %q: %w (ALTER ROLE ... REPLICATION)", ErrNoReplicationPrivilege, slot, err)
	default:
		return SlotInfo{}, fmt.Errorf("slotctl: create slot %q: %w", slot, err)
	}
}

// prerequisiteError explains SQLSTATE 55000 from slot creation, which
// PostgreSQL raises both for wal_level < logical and for
// max_replication_slots = 0: the settings tell which.
func prerequisiteError(ctx context.Context, conn Querier, slot string, cause error) error {
	var (
		walLevel string
		maxSlots int
	)
	if err := conn.QueryRow(ctx, `SELECT current_setting('wal_level'), current_setting('max_replication_slots')::int`).
		Scan(&walLevel, &maxSlots); err == nil {
		switch {
		case walLevel != "logical":
			return fmt.Errorf("%w: create slot %q: wal_level = %s; set wal_level = logical and restart PostgreSQL: %w",
				ErrWALLevel, slot, walLevel, cause)
		case maxSlots == 0:
			return fmt.Errorf("%w: create slot %q: max_replication_slots = 0; set it to at least 1 and restart PostgreSQL: %w",
				ErrNoReplicationSlots, slot, cause)
		}
	}
	return fmt.Errorf("slotctl: create slot %q: %w", slot, cause)
}

// DropSlot drops the slot named slot, discarding its position: events not
// yet streamed from it are never sent. ErrSlotActive (with the pid of the
// walsender) if a process streams from it, ErrSlotNotFound if it is missing.
func DropSlot(ctx context.Context, conn Querier, slot string) error {
	s, err := Inspect(ctx, conn, slot)
	if err != nil {
		return err
	}
	if s.Active {
		return slotActiveError(slot, s.ActivePID, nil)
	}
	_, err = conn.Exec(ctx, `SELECT pg_drop_replication_slot($1)`, slot)
	switch sqlState(err) {
	case "":
		if err != nil {
			return fmt.Errorf("slotctl: drop slot %q: %w", slot, err)
		}
		return nil
	case codeObjectInUse: // became active since Inspect
		return slotActiveError(slot, 0, err)
	case codeUndefinedObject: // dropped concurrently
		return fmt.Errorf("%w: slot %q: %w", ErrSlotNotFound, slot, err)
	case codeInsufficientPrivilege:
		return fmt.Errorf("%w: drop slot %q: %w", ErrNoReplicationPrivilege, slot, err)
	default:
		return fmt.Errorf("slotctl: drop slot %q: %w", slot, err)
	}
}

func slotActiveError(slot string, pid int, cause error) error {
	detail := fmt.Sprintf("slot %q is streaming to a process; stop the walbox (or other consumer) using it first", slot)
	if pid != 0 {
		detail = fmt.Sprintf("slot %q is streaming to server process %d; stop the walbox (or other consumer) using it first, "+
			"or end that session with SELECT pg_terminate_backend(%d)", slot, pid, pid)
	}
	if cause != nil {
		return fmt.Errorf("%w: %s: %w", ErrSlotActive, detail, cause)
	}
	return fmt.Errorf("%w: %s", ErrSlotActive, detail)
}
