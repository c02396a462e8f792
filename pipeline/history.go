package pipeline

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
)

// History identifies the database history a position belongs to: an LSN
// means something only within one history. A position read from the state
// topic is trusted only when it was recorded on the same history as the
// server walbox streams from (resumeFrom).
type History struct {
	// SystemID is IDENTIFY_SYSTEM's system identifier: set by initdb,
	// kept by physical standbys and backups, different for a new cluster
	// or a logical dump reloaded elsewhere.
	SystemID string
	// Timeline is the server's timeline; it grows with each promotion or
	// point-in-time recovery.
	Timeline int32
	// Database is the database the slot decodes.
	Database string
	// Slot is the replication slot.
	Slot string
}

// Known reports whether h was recorded: state records written before
// walbox recorded the history have only the slot.
func (h History) Known() bool { return h.SystemID != "" }

func (h History) String() string {
	if !h.Known() {
		return fmt.Sprintf("slot %q (no system identifier recorded)", h.Slot)
	}
	return fmt.Sprintf("system %s timeline %d database %q slot %q", h.SystemID, h.Timeline, h.Database, h.Slot)
}

// serverHistory is what a replication session learns about the server's
// history before it streams.
type serverHistory struct {
	History
	// WALEnd is IDENTIFY_SYSTEM's xlogpos: no position of this history
	// can be beyond it.
	WALEnd pglogrepl.LSN
	// Switches maps each ancestor timeline of the current one to the LSN
	// where the server switched away from it (TIMELINE_HISTORY): WAL
	// before it is shared with the current timeline, WAL after it is not.
	Switches map[int32]pglogrepl.LSN
	// SwitchesErr is why Switches could not be read, when a session in
	// at-least-once mode needed them (failover.go).
	SwitchesErr error
}

// identifyServer runs IDENTIFY_SYSTEM, and TIMELINE_HISTORY when the
// server is past its first timeline, on a replication connection that has
// not started streaming.
func identifyServer(ctx context.Context, conn *pgconn.PgConn, slot string) (serverHistory, error) {
	srv, err := identifySystem(ctx, conn, slot)
	if err != nil {
		return serverHistory{}, err
	}
	if srv.Switches, err = timelineSwitches(ctx, conn, srv.Timeline); err != nil {
		return serverHistory{}, err
	}
	return srv, nil
}

// identifySystem runs IDENTIFY_SYSTEM only: Switches is left nil.
func identifySystem(ctx context.Context, conn *pgconn.PgConn, slot string) (serverHistory, error) {
	sys, err := pglogrepl.IdentifySystem(ctx, conn)
	if err != nil {
		return serverHistory{}, fmt.Errorf("identify the database system (IDENTIFY_SYSTEM): %w", err)
	}
	return serverHistory{
		History: History{SystemID: sys.SystemID, Timeline: sys.Timeline, Database: sys.DBName, Slot: slot},
		WALEnd:  sys.XLogPos,
	}, nil
}

// timelineSwitches reads the ancestors of timeline tli and their switch
// points (TIMELINE_HISTORY); nil for the first timeline, which has none.
func timelineSwitches(ctx context.Context, conn *pgconn.PgConn, tli int32) (map[int32]pglogrepl.LSN, error) {
	if tli <= 1 {
		return nil, nil
	}
	th, err := pglogrepl.TimelineHistory(ctx, conn, tli)
	if err != nil {
		return nil, fmt.Errorf("read the history of timeline %d (TIMELINE_HISTORY): %w", tli, err)
	}
	switches, err := parseTimelineHistory(th.Content)
	if err != nil {
		return nil, fmt.Errorf("timeline history file %s: %w", th.FileName, err)
	}
	return switches, nil
}

// parseTimelineHistory reads a timeline history file: one line per
// ancestor timeline, "<timeline>\t<switch LSN>\t<reason>", comments and
// blank lines ignored.
func parseTimelineHistory(content []byte) (map[int32]pglogrepl.LSN, error) {
	switches := map[int32]pglogrepl.LSN{}
	sc := bufio.NewScanner(bytes.NewReader(content))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 {
			return nil, fmt.Errorf("line %d %q: want a timeline and a switch LSN", n, line)
		}
		tli, err := strconv.ParseInt(f[0], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("line %d: timeline %q: %w", n, f[0], err)
		}
		lsn, err := pglogrepl.ParseLSN(f[1])
		if err != nil {
			return nil, fmt.Errorf("line %d: switch LSN %q: %w", n, f[1], err)
		}
		switches[int32(tli)] = lsn
	}
	return switches, sc.Err()
}

// resumeFrom decides what a committed position means on the server walbox
// streams from: the end LSN up to which units are skipped as committed in
// Kafka (unitCovered), and a warning to log, if any. A position from
// another history is refused (*HistoryMismatchError), never used: skipping
// by it would drop this database's transactions.
//
//   - No position: nothing is skipped.
//   - A record without the system identifier (written before walbox
//     recorded it): accepted, with a warning, unless its slot differs or it
//     lies beyond the server's WAL; the next commit records the history.
//   - Another system, database or slot: refused.
//   - The same timeline: accepted unless it lies beyond the server's WAL
//     (a restore from an older backup).
//   - An ancestor timeline (a promotion or point-in-time recovery since):
//     units up to the switch point are skipped, never beyond it. The WAL
//     after the switch point on the old timeline is not in this history,
//     and the new timeline reuses its LSNs for other transactions, which
//     must be produced. Kafka then holds what the old timeline committed
//     after the switch point as well: the warning says from where.
//   - A later timeline, or one that is not an ancestor: refused.
func resumeFrom(pos StatePosition, srv serverHistory) (pglogrepl.LSN, string, error) {
	if pos.EndLSN == 0 && pos.CommitLSN == 0 {
		return 0, "", nil
	}
	st := pos.History
	refuse := func(reason string) (pglogrepl.LSN, string, error) {
		return 0, "", &HistoryMismatchError{State: st, StateLSN: pos.EndLSN, Server: srv.History, ServerWALEnd: srv.WALEnd, Reason: reason}
	}
	if st.Slot != "" && st.Slot != srv.Slot {
		return refuse(fmt.Sprintf("it was recorded for slot %q, not %q", st.Slot, srv.Slot))
	}
	if !st.Known() {
		if pos.EndLSN > srv.WALEnd {
			return refuse("it lies beyond the server's WAL, so it cannot be of this database")
		}
		return pos.EndLSN, "exactly-once: the committed position in the state topic was written by an older walbox and does not say which database history it belongs to; trusting it once (it is not beyond this server's WAL) and recording the history with the next commit", nil
	}
	switch {
	case st.SystemID != srv.SystemID:
		return refuse("the system identifiers differ: it comes from another Postgres cluster (a new or rebuilt cluster, a logical dump reloaded, or another cluster using the same slot name on this Kafka)")
	case st.Database != srv.Database:
		return refuse(fmt.Sprintf("it was recorded for database %q, not %q", st.Database, srv.Database))
	case st.Timeline == srv.Timeline:
		if pos.EndLSN > srv.WALEnd {
			return refuse("it lies beyond the server's WAL on the same timeline: the database was restored from an older backup")
		}
		return pos.EndLSN, "", nil
	case st.Timeline > srv.Timeline:
		return refuse("it was recorded on a later timeline than the server's: the database was restored from an older backup")
	}
	sw, ok := srv.Switches[st.Timeline]
	if !ok {
		return refuse(fmt.Sprintf("timeline %d is not an ancestor of the server's timeline %d", st.Timeline, srv.Timeline))
	}
	if pos.EndLSN <= sw {
		return pos.EndLSN, "", nil
	}
	return sw, fmt.Sprintf("exactly-once: the committed position (%s on timeline %d) lies beyond where the server switched to timeline %d (%s): Kafka holds transactions of the old timeline that this history does not have, from %s on. Skipping only what precedes the switch point; every transaction of the new timeline is produced",
		pos.EndLSN, st.Timeline, srv.Timeline, sw, sw), nil
}
