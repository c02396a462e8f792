package slotctl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// A first start creates the publication and then the slot, in two steps
// that cannot share a transaction (a slot cannot be created in a
// transaction that has written). To tell "the process died between the two"
// from "the slot vanished", the publication is created in one transaction
// with a comment naming the slot still to be created, the pending marker;
// once the slot exists the marker is removed. So on a later start:
//
//	publication missing              first start: create both
//	publication with the marker      interrupted first start: creating the slot is safe
//	publication without the marker   the slot vanished (ErrSlotVanished)
//
// A publication created by an admin (migrations/002_publication.sql) has no
// marker: the first start then needs `slotctl create` or --create-slot.

// PendingMarker returns the comment that EnsurePublication and
// CreatePublication put on a publication they create, until EnsureSlot has
// created the slot named slot: "walbox: slot <slot> pending".
func PendingMarker(slot string) string { return "walbox: slot " + slot + " pending" }

// publicationComment returns the publication's comment ("" for none) and
// whether the publication exists.
func publicationComment(ctx context.Context, conn Querier, pub string) (comment string, exists bool, err error) {
	err = conn.QueryRow(ctx, `
SELECT COALESCE(obj_description(p.oid, 'pg_publication'), '')
FROM pg_publication p
WHERE p.pubname = $1`, pub).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("slotctl: read the comment of publication %q: %w", pub, err)
	}
	return comment, true, nil
}

// clearPendingMarker removes the pending marker of r's slot from r's
// publication once the slot exists. Another comment is left alone.
func clearPendingMarker(ctx context.Context, conn Querier, r resolved) error {
	comment, exists, err := publicationComment(ctx, conn, r.publication)
	if err != nil || !exists || comment != PendingMarker(r.slot) {
		return err
	}
	_, err = conn.Exec(ctx, "COMMENT ON PUBLICATION "+pgx.Identifier{r.publication}.Sanitize()+" IS NULL")
	switch sqlState(err) {
	case "":
		if err != nil {
			return fmt.Errorf("slotctl: clear the pending marker of publication %q: %w", r.publication, err)
		}
		return nil
	case codeInsufficientPrivilege:
		// Only the owner may comment. The marker was written by whoever
		// created the publication, so this is a first start that the owner
		// began and another role finished.
		return fmt.Errorf("%w: slot %q exists, but publication %q still says %q and only its owner may clear that; "+
			"as the owner run COMMENT ON PUBLICATION %s IS NULL (or `slotctl create` as the owner): "+
			"until then a vanished slot would be recreated without notice: %w",
			ErrPublicationPrivilege, r.slot, r.publication, comment, pgx.Identifier{r.publication}.Sanitize(), err)
	default:
		return fmt.Errorf("slotctl: clear the pending marker of publication %q: %w", r.publication, err)
	}
}

// firstStartPending reports whether r's slot may be created under
// CreateOnFirstStart: its publication carries the slot's pending marker.
// Otherwise it returns the error that explains why not.
func firstStartPending(ctx context.Context, conn Querier, r resolved) error {
	comment, exists, err := publicationComment(ctx, conn, r.publication)
	switch {
	case err != nil:
		return err
	case !exists:
		// EnsurePublication creates the publication first; called alone,
		// EnsureSlot must not create a slot that would predate it.
		return fmt.Errorf("%w: slot %q does not exist and neither does publication %q; create the publication first "+
			"(Ensure does both, in that order)", ErrSlotNotFound, r.slot, r.publication)
	case comment == PendingMarker(r.slot):
		return nil
	}
	return vanishedError(r, comment)
}

// vanishedError is ErrSlotVanished with what probably happened and how to
// recover. The benign case comes first: an admin-made publication on a
// first start looks the same from here.
func vanishedError(r resolved, comment string) error {
	var b strings.Builder
	fmt.Fprintf(&b, "slot %q does not exist, but publication %q does", r.slot, r.publication)
	if strings.HasPrefix(comment, "walbox: slot ") && strings.Contains(comment, " pending") {
		fmt.Fprintf(&b, " (marked %q: pending for another slot)", comment)
	}
	fmt.Fprintf(&b, ", and walbox creates a slot by itself only on a first start where it also creates the publication, "+
		"because a new slot streams only what commits after its creation. "+
		"If this IS the first start and an admin created the publication (migrations/002_publication.sql), "+
		"start once with --create-slot or run `slotctl create --slot %s`. "+
		"Otherwise the slot has vanished: probably lost in a primary failover (PostgreSQL before 17 does not carry logical slots over "+
		"to a standby; on 17+ use --failover-slot with sync_replication_slots) or someone dropped it (`slotctl drop`, pg_drop_replication_slot), "+
		"and outbox rows committed since the old slot's last confirmed position were NOT streamed. "+
		"To recover: start walbox once with --create-slot (or run `slotctl create --slot %s`), without a --snapshot left in the configuration "+
		"from a polling-relay takeover (walbox never marks rows sent, so its --snapshot-where \"sent_at IS NULL\" would select every row still in the table), "+
		"then re-publish the outbox rows committed since a margin before the newest event your consumers received "+
		"(the commit time of the newest event received is the largest record timestamp in the outbox topics; the margin covers walbox's lag "+
		"before the slot was lost, walbox_commit_to_ack_seconds, plus the longest transaction, as created_at is a transaction's start; docs/slots.md): "+
		"they are still in %s for its retention period, and consumers deduplicate by event_id "+
		"(for example, as the table's owner, in one statement: WITH moved AS (DELETE FROM %s WHERE created_at >= "+since+" RETURNING *) "+
		"INSERT INTO %s SELECT * FROM moved ORDER BY <a column that follows the write order, such as a bigserial>, so each aggregate keeps its order; "+
		"or do both in one start: walbox run --create-slot --snapshot pending --snapshot-where \"created_at >= "+since+"\" sends those rows from the new slot's snapshot before streaming; "+
		"or, writing nothing: walbox replay --from-table --where \"created_at >= "+since+"\" --snapshot-order <that column> "+
		"sends them from a read-only snapshot of the table, marked walbox_replay: true)",
		r.slot, r.slot, r.table, r.table.Sanitize(), r.table.Sanitize())
	return fmt.Errorf("%w: %s", ErrSlotVanished, b.String())
}

// since is the start of the re-publish in vanishedError: the runbook's
// placeholders (docs/slots.md, "If the slot vanished").
const since = "'<commit time of the newest event received>'::timestamptz - interval '<margin>'"

// quoteLiteral quotes s as an SQL string literal.
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
