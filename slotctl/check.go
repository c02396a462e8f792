package slotctl

import (
	"context"
	"errors"
	"fmt"
)

// Plan is what Check found and what Ensure will therefore do.
type Plan struct {
	// Server is what Preflight learned, filled as far as it could be read.
	Server ServerInfo
	// CreatePublication and CreateSlot say that Ensure will create the
	// publication, the slot, or both (a first start, or CreateMissing).
	CreatePublication bool
	CreateSlot        bool
	// Slot is the existing slot; zero when CreateSlot or when it could not
	// be read.
	Slot SlotInfo
	// Warnings are what weakens the configuration without refusing it
	// (FailoverWarnings).
	Warnings []string
}

// Check runs, without changing anything, every check Ensure makes before
// it creates anything: Preflight's (server, role, tables, cfg.Columns),
// then what EnsurePublication and EnsureSlot would find: a missing
// publication that will not be created (the slot exists, or neither
// CreateMissing nor CreateOnFirstStart, or NoCreatePublication), one that
// does not match (ErrPublicationMismatch), a role that may not create the
// publication it would have to (ErrPublicationPrivilege), a missing slot
// that will not be created (ErrSlotNotFound, or ErrSlotVanished under
// CreateOnFirstStart), an existing slot that does not match or lost its
// WAL (ErrSlotMismatch, ErrSlotLost), and --failover-slot on a server
// before 17. It returns all of these joined, each wrapping its sentinel
// with the value found and the fix, and in Plan what Ensure will create.
//
// A failure that stops the checks (the connection, or a server older than
// 14) is returned alone. Ensure runs Check first, so that `walbox run`
// refuses exactly what Check reports; `walbox config check --connect`
// runs it alone.
func Check(ctx context.Context, conn Querier, cfg Config) (Plan, error) {
	r, err := cfg.resolve()
	if err != nil {
		return Plan{}, err
	}
	var plan Plan
	info, tables, problems, err := preflight(ctx, conn, r)
	plan.Server = info
	if err != nil {
		return plan, err
	}
	tablesFound := true
	for _, t := range tables {
		tablesFound = tablesFound && t.oid != 0
	}

	slotFound, err := slotExists(ctx, conn, r.slot)
	if err != nil {
		return plan, err
	}
	pub, err := InspectPublication(ctx, conn, r.publication)
	pubFound := err == nil
	switch {
	case errors.Is(err, ErrPublicationNotFound):
		switch {
		case slotFound:
			problems = append(problems, publicationUnderSlotError(ctx, conn, r))
		case publicationMissingError(r) != nil:
			problems = append(problems, publicationMissingError(r))
		default:
			plan.CreatePublication = true
			if tablesFound {
				if err := checkCanCreatePublication(ctx, conn, r, tables); err != nil {
					if !errors.Is(err, ErrPublicationPrivilege) {
						return plan, err
					}
					problems = append(problems, err)
				}
			}
		}
	case err != nil:
		return plan, err
	case tablesFound: // a missing table is reported already; the comparison needs them all
		if err := checkPublication(ctx, conn, pub, r, tables, slotFound); err != nil {
			if !errors.Is(err, ErrPublicationMismatch) {
				return plan, err
			}
			problems = append(problems, err)
		}
	}

	s, err := Inspect(ctx, conn, r.slot)
	switch {
	case errors.Is(err, ErrSlotNotFound):
		switch {
		case r.createMissing:
			plan.CreateSlot = true
		case r.firstStart && plan.CreatePublication:
			plan.CreateSlot = true // a first start: the publication gets the marker, then the slot is made
		case r.firstStart && pubFound:
			comment, _, cerr := publicationComment(ctx, conn, r.publication)
			switch {
			case cerr != nil:
				return plan, cerr
			case comment == PendingMarker(r.slot):
				plan.CreateSlot = true // an interrupted first start
			default:
				problems = append(problems, vanishedError(r, comment))
			}
		case r.firstStart:
			// The publication is missing and will not be created: that
			// problem is reported, and Ensure stops there.
		default:
			problems = append(problems, err)
		}
		if plan.CreateSlot && !r.failover {
			// As createMissingSlot: Patroni would drop the slot.
			if scope := PatroniScope(ctx, conn); scope != "" {
				plan.CreateSlot = false
				problems = append(problems, patroniCreateError(scope, r, err))
			}
		}
	case err != nil:
		return plan, err
	default:
		plan.Slot = s
		if err := checkSlot(ctx, conn, r, s); err != nil {
			if !errors.Is(err, ErrSlotMismatch) && !errors.Is(err, ErrSlotLost) {
				return plan, err
			}
			problems = append(problems, err)
		}
	}
	if r.failover {
		if err := failoverVersionError(info.VersionNum); err != nil {
			problems = append(problems, err)
		}
	}
	if plan.Warnings, err = FailoverWarnings(ctx, conn, cfg); err != nil {
		return plan, err
	}
	return plan, errors.Join(problems...)
}

// checkCanCreatePublication reports ErrPublicationPrivilege when the role
// may not create a publication for r's tables, as CREATE PUBLICATION
// requires: CREATE on the database and ownership of every table (a
// superuser has both).
func checkCanCreatePublication(ctx context.Context, conn Querier, r resolved, tables []tableInfo) error {
	oids := make([]uint32, len(tables))
	for i, t := range tables {
		oids[i] = t.oid
	}
	var ok bool
	err := conn.QueryRow(ctx, `
SELECT has_database_privilege(current_database(), 'CREATE')
       AND bool_and(pg_has_role(c.relowner, 'USAGE'))
FROM pg_class c WHERE c.oid = ANY($1)`, oids).Scan(&ok)
	if err != nil {
		return fmt.Errorf("slotctl: check the privilege to create publication %q: %w", r.publication, err)
	}
	if !ok {
		return publicationPrivilegeError(r)
	}
	return nil
}
