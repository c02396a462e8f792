package slotctl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// ReplaySuffix names walbox's trailing replay slot: "<slot>_replay" trails
// the live slot named slot (see walbox run --replay-window).
const ReplaySuffix = "_replay"

// Roles of a slot in walbox, as List sees them.
const (
	RoleLive   = "live"   // the slot walbox streams from (Config.Slot)
	RoleReplay = "replay" // the trailing slot "<slot>_replay"
	// RoleOrphan is a trailing slot whose live slot no longer exists (a
	// rollback to the polling relay, a cutover to a new slot, a --slot
	// rename): nothing advances it, so it holds WAL until dropped.
	RoleOrphan = "orphan"
)

// ListedSlot is one logical slot of the database as List shows it.
type ListedSlot struct {
	SlotInfo
	// ClientAddr is the address of the client streaming from the slot,
	// from pg_stat_replication; "" when inactive, "local" when it came in
	// over a Unix socket or the active process is not a walsender.
	ClientAddr string
	// ApplicationName is the client's application_name, "" when inactive.
	ApplicationName string
	// SafeWALSize is pg_replication_slots.safe_wal_size: how much more WAL
	// may be written before the slot risks losing WAL it needs. nil when
	// max_slot_wal_keep_size = -1 (no limit) or the slot is lost.
	SafeWALSize *int64
	// Role is RoleLive or RoleReplay for walbox's pgoutput slots,
	// RoleOrphan for a pgoutput slot named "<name>_replay" (or
	// Config.ReplaySlot) whose live slot does not exist in this database,
	// "" for every other slot.
	Role string
	// Trails is the live slot a RoleReplay or RoleOrphan slot trails (or
	// trailed), "" otherwise.
	Trails string
	// NotTrailing says why a RoleReplay or RoleOrphan slot cannot be one
	// walbox made (see CheckTrailing), "" when it can: walbox run refuses
	// to keep such a slot.
	NotTrailing string
	// Publication is the publication a walbox slot streams (Config's), when
	// Role is set and the publication exists; nil otherwise.
	Publication *PublicationInfo
}

// List returns every logical replication slot of the current database,
// ordered by name. Slots named cfg.Slot and cfg.ReplaySlot (default
// cfg.Slot+ReplaySuffix) that use
// pgoutput are walbox's: their Role and Publication (cfg.Publication, if
// it exists) are filled in. A pgoutput slot named "<name>_replay" whose
// slot <name> does not exist is RoleOrphan, and so is cfg's trailing slot
// while cfg.Slot does not exist. Changes nothing.
func List(ctx context.Context, conn Querier, cfg Config) ([]ListedSlot, error) {
	cfg = cfg.WithDefaults()
	if err := ValidateSlotName(cfg.Slot); err != nil {
		return nil, err
	}
	if err := validatePublication(cfg.Publication); err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `
SELECT s.slot_name::text FROM pg_replication_slots s
WHERE s.slot_type = 'logical' AND s.database = current_database()
ORDER BY s.slot_name`)
	if err != nil {
		return nil, fmt.Errorf("slotctl: list slots: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("slotctl: list slots: %w", err)
	}

	exists := make(map[string]bool, len(names))
	for _, n := range names {
		exists[n] = true
	}
	replay := cmp.Or(cfg.ReplaySlot, cfg.Slot+ReplaySuffix)

	var pub *PublicationInfo
	out := make([]ListedSlot, 0, len(names))
	for _, name := range names {
		s, err := Inspect(ctx, conn, name)
		if errors.Is(err, ErrSlotNotFound) {
			continue // dropped since the listing
		}
		if err != nil {
			return nil, err
		}
		l := ListedSlot{SlotInfo: s}
		var addr *string
		err = conn.QueryRow(ctx, `
SELECT (SELECT safe_wal_size FROM pg_replication_slots WHERE slot_name = $1),
       (SELECT COALESCE(host(r.client_addr), 'local') FROM pg_stat_replication r WHERE r.pid = $2),
       COALESCE((SELECT r.application_name FROM pg_stat_replication r WHERE r.pid = $2), '')`,
			name, s.ActivePID).Scan(&l.SafeWALSize, &addr, &l.ApplicationName)
		if err != nil {
			return nil, fmt.Errorf("slotctl: read slot %q: %w", name, err)
		}
		switch {
		case addr != nil:
			l.ClientAddr = *addr
		case s.Active:
			l.ClientAddr = "local" // a backend, e.g. pg_logical_slot_get_changes
		}
		if s.Plugin == Plugin {
			live, trailing := TrailingLive(name)
			if name == replay {
				live, trailing = cfg.Slot, true
			}
			switch {
			case name == cfg.Slot:
				l.Role = RoleLive
			case trailing && !exists[live]:
				l.Role, l.Trails = RoleOrphan, live
			case name == replay:
				l.Role, l.Trails = RoleReplay, live
			}
			if l.Trails != "" {
				err := CheckTrailing(ctx, conn, l.Trails, name)
				switch {
				case errors.Is(err, ErrNotTrailing):
					l.NotTrailing = strings.TrimPrefix(err.Error(), ErrNotTrailing.Error()+": ")
				case errors.Is(err, ErrSlotNotFound):
					continue // dropped since the listing
				case err != nil:
					return nil, err
				}
			}
		}
		if l.Role == RoleLive || l.Role == RoleReplay {
			if pub == nil {
				p, err := InspectPublication(ctx, conn, cfg.Publication)
				switch {
				case errors.Is(err, ErrPublicationNotFound):
				case err != nil:
					return nil, err
				default:
					pub = &p
				}
			}
			l.Publication = pub
		}
		out = append(out, l)
	}
	return out, nil
}
