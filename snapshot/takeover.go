package snapshot

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/walbox/walbox/slotctl"
)

// Options configure Takeover.
type Options struct {
	// ConnString is the Postgres DSN of `walbox run`, without a
	// replication parameter; the replication connection adds it.
	ConnString string
	// Slotctl names the table, slot and publication, and says whether a
	// missing slot may be created (CreateOnFirstStart, CreateMissing) as
	// for slotctl.Ensure.
	Slotctl slotctl.Config
	// Snapshot says which rows to read and in which order.
	Snapshot Config
	Router   Router
	Producer Producer
	// Logger; nil discards.
	Logger *slog.Logger
	// ProgressInterval is how often progress is logged; default 10s.
	ProgressInterval time.Duration
	// SlotBusyTimeout bounds the wait for an interrupted takeover's slot
	// to become inactive before it is dropped; default 2m.
	SlotBusyTimeout time.Duration
}

// Result says what Takeover did.
type Result struct {
	// Slot is the slot to stream from, from Slot.ConfirmedFlushLSN.
	Slot slotctl.SlotInfo
	// Taken is true when a snapshot was taken on this start.
	Taken bool
	// Redone is true when it replaced an earlier, unfinished one.
	Redone bool
	Stats  Stats
}

// Takeover prepares the publication and the slot as slotctl.Ensure does,
// except that where Ensure would create the slot, it creates it with an
// exported snapshot and produces the snapshot's rows before returning (see
// the package doc). When the slot already exists and no snapshot is
// pending, it only verifies it: a finished snapshot is never taken again.
// opts.Snapshot.Mode must not be ModeNone. Not safe to call concurrently
// on the same slot from one process; two processes are serialised by an
// advisory lock.
func Takeover(ctx context.Context, opts Options) (Result, error) {
	var res Result
	if opts.Snapshot.Mode != ModePending && opts.Snapshot.Mode != ModeAll {
		return res, fmt.Errorf("%w: Takeover needs mode pending or all, not %q", ErrInvalidConfig, opts.Snapshot.Mode)
	}
	scfg := opts.Slotctl.WithDefaults()
	if err := scfg.Validate(); err != nil {
		return res, err
	}
	table, err := slotctl.ParseTableName(scfg.Table)
	if err != nil {
		return res, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	conn, err := pgx.Connect(ctx, opts.ConnString)
	if err != nil {
		return res, fmt.Errorf("snapshot: connect to postgres: %w", err)
	}
	defer conn.Close(context.Background())

	server, err := slotctl.Preflight(ctx, conn, scfg)
	if err != nil {
		return res, err
	}
	if scfg.Failover && !slotctl.FeaturesFor(server.VersionNum).FailoverSlots {
		// Checked here, before the publication is marked: the replication
		// command's FAILOVER option would fail only after that (a syntax
		// error on 14, "unrecognized option" on 15 and 16).
		return res, fmt.Errorf("%w: failover slots need PostgreSQL 17 or newer, the server is %d; turn --failover-slot off",
			slotctl.ErrUnsupportedVersion, server.VersionNum)
	}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		return res, err
	}
	// One takeover per slot at a time: a second walbox waits here, and then
	// finds the slot made and the marker gone (or takes over a dead one's).
	// The lock goes with the session, so a killed process does not keep it.
	if _, err := conn.Exec(ctx, lockSQL, scfg.Slot); err != nil {
		return res, fmt.Errorf("snapshot: take the advisory lock of slot %q: %w", scfg.Slot, err)
	}

	comment, err := publicationComment(ctx, conn, scfg.Publication)
	if err != nil {
		return res, err
	}
	mk := parseMarker(comment, scfg.Slot)
	slot, err := slotctl.Inspect(ctx, conn, scfg.Slot)
	switch {
	case err == nil && !mk.present:
		// Made by an earlier start (its snapshot finished) or by an
		// operator: nothing to take over.
		s, err := slotctl.EnsureSlot(ctx, conn, scfg)
		if err == nil {
			log.Warn("snapshot: not taking a snapshot: the slot exists and no snapshot of it is pending "+
				"(a snapshot is taken only when walbox creates the slot); remove --snapshot and --snapshot-where from the configuration: "+
				"left there, a start that creates the slot again (--create-slot after it vanished) would take the snapshot again, "+
				"and a polling relay's \"sent_at IS NULL\" selects every row walbox sent (walbox never marks rows sent)",
				"slot", s.Name, "publication", scfg.Publication, "confirmed_lsn", s.ConfirmedFlushLSN.String())
		}
		res.Slot = s
		return res, err
	case err == nil:
		if err := dropUnfinished(ctx, conn, scfg, slot, mk, opts.SlotBusyTimeout, log); err != nil {
			return res, err
		}
		res.Redone = true
	case !errors.Is(err, slotctl.ErrSlotNotFound):
		return res, err
	case !mk.present && !scfg.CreateMissing && !(scfg.CreateOnFirstStart && comment == slotctl.PendingMarker(scfg.Slot)):
		// Not a first start and no --create-slot: EnsureSlot says why
		// (ErrSlotVanished or ErrSlotNotFound) without creating anything.
		s, err := slotctl.EnsureSlot(ctx, conn, scfg)
		res.Slot = s
		return res, err
	}

	if f := parseFinished(comment, scfg.Slot); f.present && f.selection == selection(opts.Snapshot) {
		return res, repeatedError(scfg.Publication, scfg.Slot, f)
	}
	if err := setComment(ctx, conn, scfg.Publication, SnapshotMarker(scfg.Slot)); err != nil {
		return res, err
	}
	repl, created, err := createSlotExported(ctx, opts.ConnString, scfg)
	if err != nil {
		return res, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = repl.Close(cctx)
	}()
	log.Info("snapshot: created the replication slot with an exported snapshot; rows committed before it come from the snapshot, later ones from the slot",
		"slot", scfg.Slot, "lsn", created.lsn.String(), "snapshot", created.snapshot)
	if err := setComment(ctx, conn, scfg.Publication, SnapshotMarker(scfg.Slot)+" from "+created.lsn.String()); err != nil {
		return res, err
	}

	r := &reader{
		conn: conn, table: table, cfg: opts.Snapshot, router: opts.Router, producer: opts.Producer,
		log: log, progress: opts.ProgressInterval, consistentPoint: created.lsn,
	}
	if r.progress <= 0 {
		r.progress = DefaultProgressInterval
	}
	st, err := r.read(ctx, created.snapshot)
	res.Stats = st
	if err != nil {
		return res, err
	}
	// Every snapshot record is acknowledged: only now is the snapshot
	// finished. A crash before this line takes it again on the next start.
	if err := setComment(ctx, conn, scfg.Publication, FinishedMarker(scfg.Slot, created.lsn, opts.Snapshot)); err != nil {
		return res, err
	}
	res.Taken = true
	log.Info("snapshot: finished; every snapshot record is acknowledged, streaming from the slot's consistent point",
		"slot", scfg.Slot, "rows", st.Produced, "elapsed", st.Elapsed.Round(time.Millisecond).String(), "lsn", created.lsn.String())
	s, err := slotctl.EnsureSlot(ctx, conn, scfg)
	res.Slot = s
	if err == nil && s.ConfirmedFlushLSN != created.lsn {
		err = fmt.Errorf("%w: slot %q was confirmed to %s while its snapshot was read (created at %s): another process streams from it; stop it",
			ErrSnapshotPending, scfg.Slot, s.ConfirmedFlushLSN, created.lsn)
	}
	return res, err
}

// dropUnfinished drops the slot of a takeover that did not finish, so that
// it can be created again with a new exported snapshot. Safe only while
// nothing was confirmed on the slot: then no event of it was streamed, and
// the new snapshot contains every row the old one did that is still
// pending, plus those committed since.
func dropUnfinished(ctx context.Context, conn *pgx.Conn, scfg slotctl.Config, slot slotctl.SlotInfo, mk marker,
	busyTimeout time.Duration, log *slog.Logger,
) error {
	if mk.from != 0 && slot.ConfirmedFlushLSN != mk.from {
		// Which of the two it was, the server's statistics tell: a slot
		// streamed from was decoded; a slot created again (or moved with
		// pg_replication_slot_advance) was not.
		what := "it was not decoded since it was created, so it was dropped and created again (a new slot starts at a later position) " +
			"or moved with pg_replication_slot_advance (`slotctl advance`): events committed since the snapshot's consistent point may be missing from it"
		if n, err := slotctl.DecodedTransactions(ctx, conn, scfg.Slot); err == nil && n > 0 {
			what = fmt.Sprintf("something streamed from it without the snapshot (pg_stat_replication_slots counts %d decoded transaction(s): "+
				"a walbox without --snapshot, another tool)", n)
		} else if err != nil {
			what = "something streamed from it without the snapshot, or it was dropped and created again, or advanced"
		}
		return fmt.Errorf("%w: publication %q says the snapshot of slot %q created at %s did not finish, but the slot is confirmed up to %s: "+
			"%s, so taking the snapshot again could no longer keep each aggregate's order. Check who uses slot %q. To keep streaming from it and give the snapshot up, "+
			"as the publication's owner run COMMENT ON PUBLICATION %s IS NULL; to start the takeover over, drop the slot (`slotctl drop --slot %s`) and start again",
			ErrSnapshotPending, scfg.Publication, scfg.Slot, mk.from, slot.ConfirmedFlushLSN, what, scfg.Slot,
			pgx.Identifier{scfg.Publication}.Sanitize(), scfg.Slot)
	}
	if busyTimeout <= 0 {
		busyTimeout = 2 * time.Minute
	}
	deadline := time.Now().Add(busyTimeout)
	for {
		err := slotctl.DropSlot(ctx, conn, scfg.Slot)
		if err == nil {
			break
		}
		if !errors.Is(err, slotctl.ErrSlotActive) || time.Now().After(deadline) {
			return fmt.Errorf("snapshot: drop slot %q of the unfinished snapshot: %w", scfg.Slot, err)
		}
		// A killed predecessor's walsender lingers until it notices.
		t := time.NewTimer(250 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
	log.Warn("snapshot: the previous start's snapshot did not finish; dropped its slot, which nothing had streamed from, "+
		"to take the snapshot again from the start (rows it sent are sent again, in order; consumers deduplicate by event_id)",
		"slot", scfg.Slot, "publication", scfg.Publication, "lsn", slot.ConfirmedFlushLSN.String())
	return nil
}

type createdSlot struct {
	lsn      pglogrepl.LSN
	snapshot string
}

// createSlotExported creates scfg's slot on a new replication connection
// with an exported snapshot. The snapshot lives as long as that connection
// runs no other command: the caller closes it after reading.
func createSlotExported(ctx context.Context, connString string, scfg slotctl.Config) (*pgconn.PgConn, createdSlot, error) {
	pcfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, createdSlot{}, fmt.Errorf("snapshot: parse postgres connection string: %w", err)
	}
	if pcfg.RuntimeParams == nil {
		pcfg.RuntimeParams = map[string]string{}
	}
	pcfg.RuntimeParams["replication"] = "database"
	if _, ok := pcfg.RuntimeParams["application_name"]; !ok {
		pcfg.RuntimeParams["application_name"] = "walbox"
	}
	repl, err := pgconn.ConnectConfig(ctx, pcfg)
	if err != nil {
		return nil, createdSlot{}, fmt.Errorf("snapshot: connect for replication: %w", err)
	}
	var res pglogrepl.CreateReplicationSlotResult
	if scfg.Failover {
		// The option list (PostgreSQL 15+) is the only way to ask for a
		// failover slot (17+; EnsureSlot refuses older servers).
		res, err = pglogrepl.ParseCreateReplicationSlot(repl.Exec(ctx,
			"CREATE_REPLICATION_SLOT "+scfg.Slot+" LOGICAL "+slotctl.Plugin+" (SNAPSHOT 'export', FAILOVER true)"))
	} else {
		res, err = pglogrepl.CreateReplicationSlot(ctx, repl, scfg.Slot, slotctl.Plugin,
			pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	}
	if err != nil {
		_ = repl.Close(context.Background())
		return nil, createdSlot{}, fmt.Errorf("snapshot: create slot %q with an exported snapshot: %w", scfg.Slot, err)
	}
	lsn, err := pglogrepl.ParseLSN(res.ConsistentPoint)
	if err != nil {
		_ = repl.Close(context.Background())
		return nil, createdSlot{}, fmt.Errorf("snapshot: slot %q consistent point %q: %w", scfg.Slot, res.ConsistentPoint, err)
	}
	return repl, createdSlot{lsn: lsn, snapshot: res.SnapshotName}, nil
}
