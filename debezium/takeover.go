package debezium

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/slotctl"
)

// ErrTakeover marks a takeover walbox refuses: starting would skip events
// or conflict with Debezium.
var ErrTakeover = errors.New("debezium: takeover refused")

// ErrSlotActive is returned while a process (Debezium's walsender, or one
// it left behind) still streams from the slot; the caller waits and tries
// again.
var ErrSlotActive = errors.New("debezium: the slot is still in use")

// peekLimit bounds the changes read to find Debezium's last transaction.
const peekLimit = 100_000

// Plan is where walbox starts on Debezium's slot.
type Plan struct {
	Offset Offset
	// SlotConfirmed is the slot's confirmed_flush_lsn.
	SlotConfirmed pglogrepl.LSN
	// Start is where walbox streams from: transactions committing at or
	// after it are sent. It is at least SlotConfirmed.
	Start pglogrepl.LSN
	// LastTxEnd is the end of Debezium's last transaction (Offset.TxID)
	// when found on the slot, else 0.
	LastTxEnd pglogrepl.LSN
	// Resent counts the events of that transaction Debezium had already
	// sent and recorded that walbox sends again; -1 when unknown (the
	// transaction was not found, so it is sent whole, or the offset does
	// not say how many of the events at its LSN were sent).
	Resent int
	// SkipXID, SkipUpTo and SkipAtUpTo, when SkipXID is not 0, name the
	// events walbox must not send again although it streams their
	// transaction: the inserts of transaction SkipXID before SkipUpTo,
	// and the first SkipAtUpTo of those at SkipUpTo (the rows of one COPY
	// share an LSN), which Debezium had sent before it stopped inside that
	// transaction (Offset.SentAtLSN). Skipped counts them.
	SkipXID    uint32
	SkipUpTo   pglogrepl.LSN
	SkipAtUpTo int
	Skipped    int
	// SlotAhead is true when the slot was confirmed past the stored
	// offset and its transaction, so walbox starts at the slot's position
	// (see slotAhead); callers log Why as a warning then.
	SlotAhead bool
	// Why says in a sentence how Start was chosen.
	Why string
}

// PlanTakeover decides where walbox starts on Debezium's slot so that
// every event committed after Debezium's stored offset is sent, and none
// that the offset says Debezium sent before.
//
// Which events of Debezium's last transaction (txId) the offset covers:
// those before its lsn, and of those at lsn (a COPY's rows share one) as
// many as Offset.SentAtLSN says from messageType and lsn_events_processed:
// all after a COMMIT, none after a BEGIN (whose LSN is the first change's),
// lsn_events_processed after a change (one fewer when the transaction's
// BEGIN shares that LSN, as a COPY opening the transaction does; one
// without it: the others of a COPY are sent again).
//
// After a graceful stop (Connect flushes the offsets on the way out, then
// Debezium confirms their lsn_commit, else lsn_proc) the slot's
// confirmed_flush_lsn is at most the stored lsn_commit. walbox starts at
// lsn_commit: every transaction
// committing after it is streamed. Debezium's last transaction (txId),
// whose commit ends after lsn_commit (Debezium 3 stores there the start of
// that transaction's commit record), is skipped too when the offset covers
// every outbox insert of it (Debezium sent it whole);
// this is found by peeking at the slot (pg_logical_slot_peek_binary_changes:
// nothing is consumed, the slot does not move). When Debezium stopped
// inside that transaction, walbox streams it and Plan.SkipXID, SkipUpTo and
// SkipAtUpTo name the inserts of it not to send again (walbox starts streaming only at
// transaction boundaries). When it is not found within the next 100,000
// changes, it is sent whole.
//
// The zero Offset means none is stored: walbox then starts at the slot's
// confirmed position, as Debezium would.
//
// A slot confirmed past lsn_commit (Debezium confirms on the slot before
// Connect stores the offset, see slotAhead) is taken over from its
// confirmed position: with the same transaction logic when Debezium's
// stored transaction is still pending on the slot (every transaction
// before the slot's position precedes it, so Debezium had sent them), else
// with Plan.SlotAhead set.
//
// PlanTakeover changes nothing, so it can be run again after any failure.
// It refuses (ErrTakeover) a missing slot, a slot of another plugin, an
// offset from an unfinished snapshot and one with a running incremental
// snapshot. A slot in use is ErrSlotActive.
func PlanTakeover(ctx context.Context, conn slotctl.Querier, slot, publication string, tables []string, off Offset) (Plan, error) {
	p := Plan{Offset: off, Resent: -1}
	info, err := slotctl.Inspect(ctx, conn, slot)
	if errors.Is(err, slotctl.ErrSlotNotFound) {
		return p, fmt.Errorf("%w: Debezium's slot %q does not exist in this database, so its position is gone and events committed after the stored offset (lsn_commit %s) cannot be streamed from it; "+
			"check slot.name and database.dbname; to start over, create a new slot (walbox run --create-slot) and re-publish the outbox rows committed since %s: %w",
			ErrTakeover, slot, off.Flushed(), off.Flushed(), err)
	}
	if err != nil {
		return p, err
	}
	if info.Plugin != slotctl.Plugin {
		return p, fmt.Errorf("%w: slot %q uses the plugin %q; walbox streams only %s (set plugin.name=pgoutput in Debezium with a new slot first)",
			ErrTakeover, slot, info.Plugin, slotctl.Plugin)
	}
	if info.Active {
		return p, fmt.Errorf("%w: slot %q is streamed by process %d; stop the Debezium connector first (a killed one's walsender lingers until wal_sender_timeout)",
			ErrSlotActive, slot, info.ActivePID)
	}
	if off.Snapshot {
		return p, fmt.Errorf("%w: Debezium's stored offset is from a snapshot (\"snapshot\": %s) that had not finished, so the rows it had not yet emitted would never be sent; "+
			"let Debezium finish the snapshot (its offset then has snapshot_completed or last_snapshot_record true, or no snapshot key), then stop it and take over",
			ErrTakeover, off.SnapshotType)
	}
	if off.IncrementalSnapshot != "" {
		// The EventRouter routes a snapshot's reads of the outbox as
		// events; walbox never reads the tables.
		return p, fmt.Errorf("%w: Debezium's stored offset holds a running incremental snapshot (\"incremental_snapshot_collections\": %s), so the rows it had not yet read would never be sent: "+
			"let the incremental snapshot finish (or stop it with a stop-snapshot signal), then stop Debezium once its offset has no incremental_snapshot_* fields, and take over",
			ErrTakeover, off.IncrementalSnapshot)
	}
	p.SlotConfirmed = info.ConfirmedFlushLSN
	if off == (Offset{}) {
		// No stored offset: Debezium itself would start from the slot's
		// confirmed position, which it moves only to stored offsets.
		p.Start = p.SlotConfirmed
		p.Why = "no stored offset (the offsets store lost it, or Debezium stopped before its first offset flush): from the slot's confirmed position, as Debezium would restart; " +
			"every event Debezium sent after it is sent again"
		return p, nil
	}
	flushed := off.Flushed()
	p.Start = flushed
	p.Why = fmt.Sprintf("Debezium's stored offset has lsn_commit %s: transactions committing after it are sent", flushed)
	ahead := p.SlotConfirmed > flushed
	if ahead {
		// Postgres streams a slot from its confirmed position whatever
		// position is asked for, so nothing below it can be sent by
		// anyone, Debezium restarting included.
		p.Start = p.SlotConfirmed
	}
	var last lastTx
	if off.TxID != 0 {
		last, err = peekTransaction(ctx, conn, slot, publication, tables, uint32(off.TxID), p.Start)
		if err != nil {
			return p, err
		}
	}
	before, atLSN, sentAt := last.covered(off)
	sent := before + sentAt
	if ahead && last.end == 0 {
		return slotAhead(p), nil
	}
	if ahead {
		// Debezium's stored transaction is still pending on the slot, so
		// every transaction committed before the slot's position precedes
		// it in commit order, which is the order Debezium sends in: the
		// stored offset itself says Debezium had sent them (a stored
		// offset covers only records Kafka acknowledged).
		p.Why = fmt.Sprintf("the slot is confirmed up to %s, past the stored offset's lsn_commit %s but before the end of Debezium's stored transaction %d "+
			"(Debezium confirmed it after an offset flush, before Connect stored the next offset): every transaction committing before it precedes that one, and Debezium had sent them",
			p.SlotConfirmed, flushed, off.TxID)
	}
	if off.TxID == 0 {
		return p, nil
	}
	inserts := len(last.inserts)
	switch {
	case last.end == 0 && off.committedAt() != 0 && off.committedAt() <= p.Start:
		// Not found because it committed before the start: Postgres
		// does not stream it again.
		p.Resent = 0
		p.Why += fmt.Sprintf("; Debezium had processed the COMMIT of its last transaction %d (ending at %s, the offset's %s), which is before the start: none of it is sent again",
			off.TxID, off.committedAt(), describeOffset(off, 0, 0))
	case last.end == 0:
		p.Why += fmt.Sprintf("; Debezium's last transaction %d was not found among the next %d changes, so it is sent whole", off.TxID, peekLimit)
	case sent == inserts:
		p.LastTxEnd, p.Start, p.Resent = last.end, last.end, 0
		p.Why = fmt.Sprintf("Debezium sent its last transaction %d whole (the offset, %s, covers its %d outbox events), so walbox starts after its end %s",
			off.TxID, describeOffset(off, atLSN, sentAt), inserts, last.end)
	case sent == 0:
		p.LastTxEnd, p.Resent = last.end, 0
		p.Why += fmt.Sprintf("; the offset covers none of the %d outbox events of Debezium's last transaction %d (it is %s): walbox sends it whole",
			inserts, off.TxID, describeOffset(off, atLSN, sentAt))
	default:
		p.LastTxEnd, p.Resent = last.end, 0
		p.SkipXID, p.SkipUpTo, p.SkipAtUpTo, p.Skipped = uint32(off.TxID), off.LSN, sentAt, sent
		p.Why += fmt.Sprintf("; Debezium stopped inside transaction %d (%d of its %d outbox events sent: the offset is %s): walbox streams it and skips those %d (the %d inserts before %s and the first %d of the %d at it)",
			off.TxID, sent, inserts, describeOffset(off, atLSN, sentAt), sent, before, off.LSN, sentAt, atLSN)
	}
	if last.end != 0 && !off.exactAtLSN(atLSN, last.beginAt(off)) {
		p.Resent = -1
		if last.beginAt(off) && isChange(off.MessageType) && off.LSNEventsProcessed > 1 {
			p.Why += fmt.Sprintf("; the transaction's BEGIN shares the offset's lsn, so lsn_events_processed %d may count it (a Debezium that restarted inside those events counts the BEGIN at their LSN): "+
				"%d of the %d events at that lsn are taken as sent, and the next one is sent again, a duplicate if Debezium had sent it", off.LSNEventsProcessed, sentAt, atLSN)
		} else {
			p.Why += fmt.Sprintf("; the offset does not say how many of the %d events at its lsn Debezium had sent (lsn_events_processed is Debezium 3.7's, messageType 2.1.4's): "+
				"those after the first %d are sent again, duplicates of any Debezium had sent", atLSN, sentAt)
		}
	}
	return p, nil
}

// committedAt returns the end of transaction TxID when the offset says
// Debezium processed its commit, else 0: the offset is at its COMMIT
// (messageType COMMIT, lsn its end), or, from a Debezium 2.2 to 2.6
// without transaction metadata, which processes a COMMIT without moving
// lsn or messageType off the transaction's last change, lsn_proc and
// lsn_commit are both that commit's, past lsn (a change moves lsn_proc to
// its own lsn, and nothing else moves both).
func (o Offset) committedAt() pglogrepl.LSN {
	switch {
	case o.MessageType == MessageCommit:
		return o.LSN
	case o.LSNProc != 0 && o.LSNProc == o.LSNCommit && o.LSNProc > o.LSN && (isChange(o.MessageType) || o.MessageType == ""):
		return o.LSNCommit
	}
	return 0
}

// exactAtLSN reports whether the offset says exactly how many of the
// atLSN events at its LSN Debezium had sent, so that none it had sent is
// sent again.
func (o Offset) exactAtLSN(atLSN int, beginAtLSN bool) bool {
	switch {
	case atLSN == 0, o.MessageType == MessageCommit, o.MessageType == MessageBegin:
		return true
	case isChange(o.MessageType):
		if beginAtLSN && o.LSNEventsProcessed > 1 {
			// The count may include the Begin (SentAtLSN): exact only
			// when every event at the LSN is covered anyway.
			return o.LSNEventsProcessed-1 >= int64(atLSN)
		}
		return o.LSNEventsProcessed > 0 || atLSN == 1
	}
	return false
}

// describeOffset says in words where in its transaction an offset is.
func describeOffset(off Offset, atLSN, sentAt int) string {
	typ := off.MessageType
	if typ == "" {
		typ = "no messageType"
	}
	s := fmt.Sprintf("lsn %s, %s", off.LSN, typ)
	if off.LSNEventsProcessed != 0 {
		s += fmt.Sprintf(", lsn_events_processed %d", off.LSNEventsProcessed)
	}
	if atLSN > 0 {
		s += fmt.Sprintf(": %d of the %d outbox events at that LSN sent", sentAt, atLSN)
	}
	return s
}

// slotAhead plans the takeover of a slot that Debezium confirmed past its
// stored offset and past the transaction that offset names: the signature
// of a stop without a final offset flush (a kill, an OOM, a lost node).
//
// Why this loses nothing: Kafka Connect calls the task's commitRecord for
// a record once the producer has Kafka's acknowledgement of it, and its
// commit() after each offset flush; Debezium's commit() confirms on the
// slot the lsn_commit (else lsn_proc) of the newest record acknowledged
// so far, which is usually newer than the offset that flush stored; that
// one is stored only at the next flush (offset.flush.interval.ms, 60 s by
// default), which a killed worker never reaches. So a slot ahead of the
// stored offset holds a position Debezium confirmed after Kafka had
// acknowledged what precedes it, and starting there skips nothing that
// reached Kafka; and since Postgres never streams a slot's changes below
// its confirmed position again, Debezium restarting on this slot would
// start there too: the takeover is Debezium's own restart. The events
// Debezium sent after the slot's position are sent again: duplicates
// bounded by one flush interval of events.
//
// What walbox cannot tell from the slot is who moved it: a
// pg_replication_slot_advance, a SQL consumer or a recreated slot leaves
// the same picture, with events that never reached Kafka. Plan.Why says
// so, with the range to re-publish in that case.
func slotAhead(p Plan) Plan {
	p.SlotAhead, p.Resent = true, -1
	p.Why = fmt.Sprintf("the slot is confirmed up to %s, past Debezium's stored offset (lsn_commit %s, lsn %s, txId %d): Debezium stopped without a final offset flush (killed, out of memory, node lost), "+
		"or walbox already took over and streamed. Debezium confirms on the slot, after each offset flush, the newest position Kafka acknowledged, while Connect stores that offset only at its next flush, "+
		"so every event committed before %s reached Kafka, and walbox starts there (Postgres streams nothing below a slot's confirmed position, so Debezium restarting would too); "+
		"the events Debezium sent after it are sent again: duplicates bounded by one offset flush interval (offset.flush.interval.ms, 60 s by default). "+
		"Only if something other than this connector moved the slot (pg_replication_slot_advance, a SQL consumer, a recreated slot) did the events committed between %s and %s never reach Kafka: re-publish them then",
		p.SlotConfirmed, p.Offset.Flushed(), p.Offset.LSN, p.Offset.TxID, p.SlotConfirmed, p.Offset.Flushed(), p.SlotConfirmed)
	return p
}

type lastTx struct {
	begin   pglogrepl.LSN   // the LSN of its Begin
	end     pglogrepl.LSN   // commit end; 0 when not found
	inserts []pglogrepl.LSN // the LSNs of its outbox inserts, in stream order
}

// covered returns how many of the transaction's outbox inserts the offset
// covers: those before its lsn (before), and sentAt of the atLSN at it.
func (t lastTx) covered(off Offset) (before, atLSN, sentAt int) {
	for _, l := range t.inserts {
		switch {
		case l < off.LSN:
			before++
		case l == off.LSN:
			atLSN++
		}
	}
	return before, atLSN, off.SentAtLSN(atLSN, t.beginAt(off))
}

// beginAt reports whether the transaction's Begin is at the offset's LSN:
// pgoutput sends it at the LSN of the transaction's first change (before
// PostgreSQL 15 at its first WAL record), which a COPY opening the
// transaction shares with all its rows.
func (t lastTx) beginAt(off Offset) bool {
	return t.end != 0 && t.begin == off.LSN
}

// peekTransaction decodes the slot's pending changes without consuming
// them and describes transaction xid's outbox inserts, if it commits after
// after.
func peekTransaction(ctx context.Context, conn slotctl.Querier, slot, publication string, tables []string, xid uint32, after pglogrepl.LSN) (lastTx, error) {
	want := map[string]bool{}
	for _, t := range tables {
		if !strings.Contains(t, ".") {
			t = "public." + t
		}
		want[t] = true
	}
	rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, $2, 'proto_version', '1', 'publication_names', $3)`,
		slot, peekLimit, pgx.Identifier{publication}.Sanitize())
	if err != nil {
		return lastTx{}, fmt.Errorf("debezium: peek at slot %q: %w", slot, err)
	}
	defer rows.Close()
	var (
		res     lastTx
		cur     uint32
		begin   pglogrepl.LSN
		rels    = map[uint32]string{}
		inserts []pglogrepl.LSN
	)
	for rows.Next() {
		var (
			lsnText string
			data    []byte
		)
		if err := rows.Scan(&lsnText, &data); err != nil {
			return lastTx{}, fmt.Errorf("debezium: peek at slot %q: %w", slot, err)
		}
		lsn, err := pglogrepl.ParseLSN(lsnText)
		if err != nil {
			return lastTx{}, fmt.Errorf("debezium: peek at slot %q: %w", slot, err)
		}
		msg, err := parseMessage(data)
		if err != nil {
			return lastTx{}, fmt.Errorf("debezium: peek at slot %q: change at %s: %w", slot, lsn, err)
		}
		switch m := msg.(type) {
		case *pglogrepl.RelationMessage:
			rels[m.RelationID] = m.Namespace + "." + m.RelationName
		case *pglogrepl.BeginMessage:
			cur, begin, inserts = m.Xid, lsn, inserts[:0]
		case *pglogrepl.InsertMessage:
			if cur == xid && want[rels[m.RelationID]] {
				inserts = append(inserts, lsn)
			}
		case *pglogrepl.CommitMessage:
			if cur == xid && m.TransactionEndLSN > after {
				res.begin, res.end, res.inserts = begin, m.TransactionEndLSN, inserts
				return res, rows.Err()
			}
		}
	}
	return lastTx{}, rows.Err()
}

// parseMessage parses a pgoutput message, turning a panic of pglogrepl on
// a malformed message into an error.
func parseMessage(data []byte) (msg pglogrepl.Message, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("malformed pgoutput message: %v", p)
		}
	}()
	if len(data) == 0 {
		return nil, errors.New("empty pgoutput message")
	}
	return pglogrepl.Parse(data)
}
