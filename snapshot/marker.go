package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// SnapshotMarker returns the comment a takeover keeps on the publication
// while the snapshot for slot is not finished: "walbox: slot <slot>
// snapshot pending". Once the slot exists the marker goes on with
// " from <LSN>", the slot's consistent point.
func SnapshotMarker(slot string) string { return "walbox: slot " + slot + " snapshot pending" }

// FinishedMarker returns the comment a finished takeover leaves on the
// publication: "walbox: slot <slot> snapshot finished at <LSN>; <mode>",
// with " where <where>" for ModePending. It records which rows the
// snapshot selected, so that a later start that recreates the slot does
// not take the same snapshot again (ErrSnapshotRepeated): walbox never
// marks a row sent, so the old relay's "sent_at IS NULL" then selects
// every row walbox has sent since.
func FinishedMarker(slot string, lsn pglogrepl.LSN, cfg Config) string {
	return finishedPrefix(slot) + lsn.String() + "; " + selection(cfg)
}

func finishedPrefix(slot string) string { return "walbox: slot " + slot + " snapshot finished at " }

// selection is how FinishedMarker writes what a snapshot selects.
func selection(cfg Config) string {
	if cfg.Mode == ModePending {
		return string(cfg.Mode) + " where " + strings.TrimSpace(cfg.Where)
	}
	return string(cfg.Mode)
}

// finished is a parsed FinishedMarker.
type finished struct {
	present   bool
	at        pglogrepl.LSN
	selection string
}

func parseFinished(comment, slot string) finished {
	rest, ok := strings.CutPrefix(comment, finishedPrefix(slot))
	if !ok {
		return finished{}
	}
	at, sel, ok := strings.Cut(rest, "; ")
	lsn, err := pglogrepl.ParseLSN(at)
	if !ok || err != nil {
		return finished{}
	}
	return finished{present: true, at: lsn, selection: sel}
}

// repeatedError is ErrSnapshotRepeated for a takeover that would take f's
// snapshot again.
func repeatedError(pub, slot string, f finished) error {
	return fmt.Errorf("%w: publication %q says a takeover of slot %q finished at %s with the same selection (%s), and slot %q is to be created again: "+
		"the snapshot would re-send every row it selects that walbox has sent since (walbox never marks rows sent, so a polling relay's \"sent_at IS NULL\" selects them all). "+
		"--snapshot is probably left in the configuration from the takeover: remove --snapshot and --snapshot-where and start again "+
		"(with --create-slot if the slot vanished; then re-publish what consumers missed by time, e.g. --snapshot pending --snapshot-where \"created_at >= '<commit time of the newest event received>'::timestamptz - interval '<margin>'\", see docs/slots.md). "+
		"To take this snapshot again anyway, as the publication's owner run COMMENT ON PUBLICATION %s IS NULL; nothing was created",
		ErrSnapshotRepeated, pub, f.at, f.selection, slot, slot, pgx.Identifier{pub}.Sanitize())
}

// marker is a parsed snapshot marker.
type marker struct {
	present bool
	from    pglogrepl.LSN // 0 when not recorded yet
}

// parseMarker reads comment as slot's snapshot marker.
func parseMarker(comment, slot string) marker {
	base := SnapshotMarker(slot)
	if comment == base {
		return marker{present: true}
	}
	if rest, ok := strings.CutPrefix(comment, base+" from "); ok {
		if lsn, err := pglogrepl.ParseLSN(rest); err == nil {
			return marker{present: true, from: lsn}
		}
		return marker{present: true}
	}
	return marker{}
}

// querier is an ordinary (non-replication) session.
type querier interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// publicationComment returns the publication's comment, "" for none.
func publicationComment(ctx context.Context, conn querier, pub string) (string, error) {
	var comment string
	err := conn.QueryRow(ctx, `
SELECT COALESCE(obj_description(p.oid, 'pg_publication'), '')
FROM pg_publication p WHERE p.pubname = $1`, pub).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("snapshot: publication %q does not exist", pub)
	}
	if err != nil {
		return "", fmt.Errorf("snapshot: read the comment of publication %q: %w", pub, err)
	}
	return comment, nil
}

// setComment sets the publication's comment ("" removes it). Only the
// publication's owner may.
func setComment(ctx context.Context, conn querier, pub, comment string) error {
	lit := "NULL"
	if comment != "" {
		lit = "'" + strings.ReplaceAll(comment, "'", "''") + "'"
	}
	_, err := conn.Exec(ctx, "COMMENT ON PUBLICATION "+pgx.Identifier{pub}.Sanitize()+" IS "+lit)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" {
		return fmt.Errorf("%w: only the owner of publication %q may comment on it, and the takeover records there whether its snapshot finished; "+
			"start walbox with --snapshot once as the publication's owner (the owner of the outbox table), "+
			"or have the owner run ALTER PUBLICATION %s OWNER TO <walbox's role>: %w",
			ErrMarkerPrivilege, pub, pgx.Identifier{pub}.Sanitize(), err)
	}
	if err != nil {
		return fmt.Errorf("snapshot: comment on publication %q: %w", pub, err)
	}
	return nil
}

// lockSQL takes the advisory lock of the takeover of slot $1, which
// Takeover holds from before it marks the publication until it returns.
// The lock goes with the session, so a killed process does not keep it.
const lockSQL = `SELECT pg_advisory_lock(hashtext('walbox snapshot ' || $1))`

// LockNotPending is what `walbox run` without --snapshot checks before it
// prepares the slot: it takes the advisory lock a takeover of slot holds
// (waiting, with a log line, while another walbox takes over), then reads
// publication pub's comment. If slot's snapshot marker is there, a
// takeover began and did not finish: it returns PendingError, since
// streaming would send newer events before older pending rows. Otherwise
// it returns release, which ends the session and so the lock: call it once
// the slot is ready, so that no takeover can begin between the check and
// the slot's preparation. A missing publication is no marker. ctx bounds
// the wait.
func LockNotPending(ctx context.Context, connString, pub, slot string, log *slog.Logger) (release func(), err error) {
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return nil, fmt.Errorf("snapshot: connect to postgres: %w", err)
	}
	closeConn := func() { conn.Close(context.Background()) }
	defer func() {
		if err != nil {
			closeConn()
		}
	}()
	var got bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext('walbox snapshot ' || $1))`, slot).Scan(&got); err != nil {
		return nil, fmt.Errorf("snapshot: take the advisory lock of slot %q: %w", slot, err)
	}
	if !got {
		log.Info("waiting for another walbox's takeover of the slot to finish before checking whether its snapshot is pending",
			"slot", slot, "publication", pub)
		if _, err := conn.Exec(ctx, lockSQL, slot); err != nil {
			return nil, fmt.Errorf("snapshot: wait for the advisory lock of slot %q (held by a takeover): %w", slot, err)
		}
	}
	var comment string
	err = conn.QueryRow(ctx, `
SELECT COALESCE(obj_description(p.oid, 'pg_publication'), '')
FROM pg_publication p WHERE p.pubname = $1`, pub).Scan(&comment)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return closeConn, nil // a first start: nothing began
	case err != nil:
		return nil, fmt.Errorf("snapshot: read the comment of publication %q: %w", pub, err)
	case parseMarker(comment, slot).present:
		return nil, PendingError(pub, slot)
	}
	return closeConn, nil
}

// Pending reports whether publication pub carries slot's snapshot marker:
// a takeover began and did not finish. A missing publication is false.
// It reads without the takeover's lock, so it may miss a takeover that
// is beginning: `walbox run` uses LockNotPending.
func Pending(ctx context.Context, connString, pub, slot string) (bool, error) {
	conn, err := pgx.Connect(ctx, connString)
	if err != nil {
		return false, fmt.Errorf("snapshot: connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())
	var comment string
	err = conn.QueryRow(ctx, `
SELECT COALESCE(obj_description(p.oid, 'pg_publication'), '')
FROM pg_publication p WHERE p.pubname = $1`, pub).Scan(&comment)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil // a first start: nothing began
	}
	if err != nil {
		return false, fmt.Errorf("snapshot: read the comment of publication %q: %w", pub, err)
	}
	return parseMarker(comment, slot).present, nil
}

// PendingError is ErrSnapshotPending for a start without --snapshot that
// found the marker: streaming now would send the slot's events before the
// snapshot's older rows of the same aggregates.
func PendingError(pub, slot string) error {
	return fmt.Errorf("%w: publication %q says %q: a start with --snapshot created slot %q and was stopped before every snapshot row was acknowledged by Kafka. "+
		"Streaming now would send newer events before older pending rows of the same aggregates. "+
		"Start walbox again with the same --snapshot, --snapshot-where and --snapshot-order to take the snapshot again (rows already sent are sent again, in order); "+
		"or, to give the snapshot up (pending rows not yet sent will NOT be sent), as the publication's owner run COMMENT ON PUBLICATION %s IS NULL",
		ErrSnapshotPending, pub, SnapshotMarker(slot), slot, pgx.Identifier{pub}.Sanitize())
}
