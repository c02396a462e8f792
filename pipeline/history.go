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
	// Ancestry is the content of the timeline's history (TIMELINE_HISTORY):
	// each ancestor timeline and the LSN where the history switched away
	// from it, oldest first, as "1@0/3000158 2@0/5000060". Empty on the
	// first timeline, and where it is not known (a state record of an
	// older walbox, a history that could not be read). Two servers on the
	// same timeline number with different ancestries (two standbys of one
	// primary promoted one after the other, without a shared WAL archive)
	// hold different transactions after the first switch point they do
	// not share (sharedHistory).
	Ancestry string
}

// Known reports whether h was recorded: state records written before
// walbox recorded the history have only the slot.
func (h History) Known() bool { return h.SystemID != "" }

func (h History) String() string {
	if !h.Known() {
		return fmt.Sprintf("slot %q (no system identifier recorded)", h.Slot)
	}
	if h.Ancestry != "" {
		return fmt.Sprintf("system %s timeline %d (switched at %s) database %q slot %q", h.SystemID, h.Timeline, h.Ancestry, h.Database, h.Slot)
	}
	return fmt.Sprintf("system %s timeline %d database %q slot %q", h.SystemID, h.Timeline, h.Database, h.Slot)
}

// timelineSwitch is one line of a timeline history file: the history left
// timeline Timeline at LSN.
type timelineSwitch struct {
	Timeline int32
	LSN      pglogrepl.LSN
}

// formatAncestry renders switches as History.Ancestry.
func formatAncestry(switches []timelineSwitch) string {
	parts := make([]string, len(switches))
	for i, s := range switches {
		parts[i] = fmt.Sprintf("%d@%s", s.Timeline, s.LSN)
	}
	return strings.Join(parts, " ")
}

// ancestry parses h.Ancestry; ok is false when the ancestry is not known
// (a timeline past the first without one recorded, or one that does not
// parse).
func (h History) ancestry() (switches []timelineSwitch, ok bool) {
	if h.Ancestry == "" {
		return nil, h.Timeline <= 1
	}
	for _, f := range strings.Fields(h.Ancestry) {
		tli, lsn, found := strings.Cut(f, "@")
		if !found {
			return nil, false
		}
		n, err := strconv.ParseInt(tli, 10, 32)
		if err != nil {
			return nil, false
		}
		l, err := pglogrepl.ParseLSN(lsn)
		if err != nil {
			return nil, false
		}
		switches = append(switches, timelineSwitch{Timeline: int32(n), LSN: l})
	}
	return switches, true
}

// historyRelation says how two histories of one system relate.
type historyRelation int

const (
	// historiesUnknown: an ancestry is not known; only the timeline
	// numbers can be compared.
	historiesUnknown historyRelation = iota
	// historiesSame: the same timeline with the same switch points.
	historiesSame
	// historyAncestor: the first history's timeline is an ancestor of
	// the second's, which left it at the shared end.
	historyAncestor
	// historyDescendant: the second's timeline is an ancestor of the
	// first's.
	historyDescendant
	// historiesDiverged: neither contains the other (siblings): they
	// share WAL up to the shared end only.
	historiesDiverged
)

// sharedHistory compares two histories of one system by their content,
// never by their timeline numbers alone: each is a sequence of timelines,
// each timeline running from the previous switch point to its own (the
// current one without end). They share WAL up to end, where they first
// differ; end is meaningless for historiesSame and historiesUnknown.
//
// Two servers on the same timeline with the same switch points are taken
// for the same history: a timeline history file cannot tell two standbys
// promoted at the very same LSN apart (resumeOnHistory's WAL end check
// remains).
func sharedHistory(a, b History) (rel historyRelation, end pglogrepl.LSN) {
	sa, oka := a.ancestry()
	sb, okb := b.ancestry()
	if !oka || !okb {
		return historiesUnknown, 0
	}
	const open = pglogrepl.LSN(1<<64 - 1)
	sa = append(sa, timelineSwitch{Timeline: a.Timeline, LSN: open})
	sb = append(sb, timelineSwitch{Timeline: b.Timeline, LSN: open})
	var begin pglogrepl.LSN
	for i := 0; i < len(sa) && i < len(sb); i++ {
		x, y := sa[i], sb[i]
		switch {
		case x.Timeline != y.Timeline:
			return historiesDiverged, begin
		case x.LSN == y.LSN && x.LSN == open:
			return historiesSame, 0
		case x.LSN == y.LSN:
			begin = x.LSN
		case x.LSN == open:
			return historyAncestor, y.LSN
		case y.LSN == open:
			return historyDescendant, x.LSN
		default:
			return historiesDiverged, min(x.LSN, y.LSN)
		}
	}
	// A history file that lists a timeline twice: nothing known.
	return historiesUnknown, 0
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
	// InRecovery is pg_is_in_recovery(): the server is a standby.
	InRecovery bool
	// SlotConfirmed is the slot's confirmed_flush_lsn on the server, read
	// only after sessions that decoded a standby (standbyFollowed); 0 when
	// not read.
	SlotConfirmed pglogrepl.LSN
}

// serverInRecovery asks a replication connection whether its server is a
// standby (replication=database connections take simple SQL queries).
func serverInRecovery(ctx context.Context, conn *pgconn.PgConn) (bool, error) {
	row, err := simpleQueryRow(ctx, conn, `SELECT pg_catalog.pg_is_in_recovery()`)
	if err != nil || len(row) != 1 {
		return false, fmt.Errorf("ask the server whether it is a standby (pg_is_in_recovery()): %w", err)
	}
	return row[0] == "t", nil
}

// identifyServer runs IDENTIFY_SYSTEM, and TIMELINE_HISTORY when the
// server is past its first timeline, on a replication connection that has
// not started streaming.
func identifyServer(ctx context.Context, conn *pgconn.PgConn, slot string) (serverHistory, error) {
	srv, err := identifySystem(ctx, conn, slot)
	if err != nil {
		return serverHistory{}, err
	}
	if err := readAncestry(ctx, conn, &srv); err != nil {
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

// readAncestry reads the server's timeline history into srv: Switches and
// Ancestry, or SwitchesErr.
func readAncestry(ctx context.Context, conn *pgconn.PgConn, srv *serverHistory) error {
	if srv.Timeline <= 1 {
		return nil
	}
	th, err := pglogrepl.TimelineHistory(ctx, conn, srv.Timeline)
	if err != nil {
		srv.SwitchesErr = fmt.Errorf("read the history of timeline %d (TIMELINE_HISTORY): %w", srv.Timeline, err)
		return srv.SwitchesErr
	}
	list, err := parseTimelineSwitches(th.Content)
	if err != nil {
		srv.SwitchesErr = fmt.Errorf("timeline history file %s: %w", th.FileName, err)
		return srv.SwitchesErr
	}
	srv.Switches = make(map[int32]pglogrepl.LSN, len(list))
	for _, s := range list {
		srv.Switches[s.Timeline] = s.LSN
	}
	srv.Ancestry = formatAncestry(list)
	return nil
}

// parseTimelineHistory reads a timeline history file: one line per
// ancestor timeline, "<timeline>\t<switch LSN>\t<reason>", comments and
// blank lines ignored.
func parseTimelineHistory(content []byte) (map[int32]pglogrepl.LSN, error) {
	list, err := parseTimelineSwitches(content)
	if err != nil {
		return nil, err
	}
	switches := make(map[int32]pglogrepl.LSN, len(list))
	for _, s := range list {
		switches[s.Timeline] = s.LSN
	}
	return switches, nil
}

// parseTimelineSwitches reads a timeline history file in its order.
func parseTimelineSwitches(content []byte) ([]timelineSwitch, error) {
	var switches []timelineSwitch
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
		switches = append(switches, timelineSwitch{Timeline: int32(tli), LSN: lsn})
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
	}
	// By content first: the same timeline number can be another history.
	switch rel, end := sharedHistory(st, srv.History); rel {
	case historiesSame:
		if pos.EndLSN > srv.WALEnd && !srv.InRecovery {
			return refuse("it lies beyond the server's WAL on the same timeline: the database was restored from an older backup")
		}
		return pos.EndLSN, "", nil
	case historyDescendant:
		return refuse(fmt.Sprintf("it was recorded on timeline %d, which left the server's timeline %d at %s: the database was restored from an older backup, or the server is an old primary that was not shut down", st.Timeline, srv.Timeline, end))
	case historyAncestor, historiesDiverged:
		if pos.EndLSN <= end {
			return pos.EndLSN, "", nil
		}
		return end, fmt.Sprintf("exactly-once: the committed position (%s on timeline %d, switch points %q) lies beyond the end of the WAL its history shares with the server's (timeline %d, switch points %q): %s. Kafka holds transactions of the other history that this one does not have, from %s on. Skipping only what precedes it; every transaction of the server's history after it is produced",
			pos.EndLSN, st.Timeline, st.Ancestry, srv.Timeline, srv.Ancestry, end, end), nil
	}
	switch {
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
