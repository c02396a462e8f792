package slotctl

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/decoder"
)

// ErrAdvanceBackwards: Advance was asked to move a slot to a position
// before its confirmed_flush_lsn, which a slot cannot do: the WAL and
// catalog rows before it may be gone, and the server refuses such a
// request ("cannot advance replication slot to X, minimum is Y", SQLSTATE
// 55000). Advance checks first, to say so with the slot's position and
// what to do instead.
var ErrAdvanceBackwards = errors.New("slotctl: cannot move a replication slot backwards")

// ErrCannotCount: CountEvents could not count the events (another output
// plugin, a missing publication, a server error). Callers report it and go
// on: counting is advice, not a precondition.
var ErrCannotCount = errors.New("slotctl: could not count events")

// lsnRE is the text form of an LSN as Postgres prints it: two hexadecimal
// numbers of up to 8 digits.
var lsnRE = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`)

// ParseLSN parses an LSN written as Postgres prints it, e.g. 16/B374D848.
// A malformed one wraps ErrInvalidConfig and names the expected form.
func ParseLSN(s string) (pglogrepl.LSN, error) {
	if !lsnRE.MatchString(s) {
		return 0, fmt.Errorf("%w: LSN %q is malformed: write it as Postgres prints it, two hexadecimal numbers separated by a slash, e.g. 16/B374D848", ErrInvalidConfig, s)
	}
	lsn, err := pglogrepl.ParseLSN(s)
	if err != nil {
		return 0, fmt.Errorf("%w: LSN %q: %w; expected the form 16/B374D848", ErrInvalidConfig, s, err)
	}
	return lsn, nil
}

// CurrentWALLSN is the server's current WAL position: the flushed one on
// a primary, the last replayed one on a standby. A slot cannot be advanced
// past it.
func CurrentWALLSN(ctx context.Context, conn Querier) (pglogrepl.LSN, error) {
	var s string
	err := conn.QueryRow(ctx, `SELECT (CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_flush_lsn() END)::text`).Scan(&s)
	if err != nil {
		return 0, fmt.Errorf("slotctl: read the current WAL position: %w", err)
	}
	return pglogrepl.ParseLSN(s)
}

// Events says which decoded changes are walbox's events, as walbox run
// routes them: the inserts into the outbox tables that the publication
// streams, and the transactional logical decoding messages with the
// message prefix (--message-prefix). A plain value, safe to copy.
type Events struct {
	// Publication is the publication pgoutput decodes. Default "walbox".
	Publication string
	// Table is the outbox table or tables, as Config.Table: inserts into
	// any other table of the publication are not events (walbox counts and
	// logs them). Default "public.outbox".
	Table string
	// MessagePrefix, when set, makes the transactional messages written
	// with pg_logical_emit_message(true, MessagePrefix, ...) events too.
	// Messages of other prefixes (heartbeats among them) and
	// non-transactional ones are not: walbox never routes those as events.
	// Default "": no message is an event.
	MessagePrefix string
}

// String says in words what the events are, for messages: "inserts into
// public.outbox and messages with prefix \"outbox\"".
func (e Events) String() string {
	c := Config{Table: e.Table}.WithDefaults()
	s := "inserts into " + c.Table
	if tables, err := ParseTableList(c.Table); err == nil {
		s = "inserts into " + tableList(tables, false)
	}
	if e.MessagePrefix != "" {
		s += fmt.Sprintf(" and messages with prefix %q", e.MessagePrefix)
	}
	return s
}

// CountEvents counts the events (see Events) the slot named slot holds in
// the transactions a consumer has not confirmed yet whose commit record
// starts before upto (0: all of them, to the end of the WAL written so
// far). That is what advancing the slot to upto skips, or what dropping it
// (upto 0) discards.
//
// The slot is not consumed: CountEvents decodes a temporary copy of it
// (pg_copy_logical_replication_slot(..., temporary => true)) with
// pg_logical_slot_peek_binary_changes, and drops the copy. A temporary slot
// belongs to the session, so even if slotctl or its connection dies during
// the count, the server drops the copy: nothing is left behind. Decoding
// reads the WAL the slot retains, which takes time in proportion to it:
// bound ctx. A failure wraps ErrCannotCount and says why.
func CountEvents(ctx context.Context, conn Querier, slot string, ev Events, upto pglogrepl.LSN) (n int64, err error) {
	if err := ValidateSlotName(slot); err != nil {
		return 0, err
	}
	c := Config{Table: ev.Table, Publication: ev.Publication}.WithDefaults()
	if err := validatePublication(c.Publication); err != nil {
		return 0, err
	}
	tables, err := ParseTableList(c.Table)
	if err != nil {
		return 0, err
	}
	outbox := make(map[string]bool, len(tables))
	for _, t := range tables {
		outbox[t.String()] = true
	}
	s, err := Inspect(ctx, conn, slot)
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCannotCount, err)
	}
	if s.SlotType != "logical" {
		return 0, fmt.Errorf("%w: slot %q is a %s slot: it decodes no events", ErrCannotCount, slot, s.SlotType)
	}
	if s.Plugin != Plugin {
		return 0, fmt.Errorf("%w: slot %q uses the output plugin %q; slotctl counts only pgoutput slots", ErrCannotCount, slot, s.Plugin)
	}
	copyName, drop, err := TemporaryCopy(ctx, conn, slot, "slotctl_count")
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrCannotCount, err)
	}
	defer func() {
		// The copy would go with the session anyway; drop it now so that it
		// does not hold WAL while slotctl goes on (e.g. waits for a human).
		if derr := drop(); derr != nil && err == nil {
			err = derr
		}
	}()

	var uptoArg any // NULL: to the end of the WAL
	if upto != 0 {
		uptoArg = upto.String()
	}
	// pgoutput sends logical messages only when asked (PostgreSQL 14+,
	// which walbox requires); walbox asks when it routes them.
	messages := "false"
	if ev.MessagePrefix != "" {
		messages = "true"
	}
	rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, $2::pg_lsn, NULL,
		'proto_version', '1', 'publication_names', $3, 'messages', $4)`, copyName, uptoArg, pgx.Identifier{c.Publication}.Sanitize(), messages)
	if err != nil {
		return 0, fmt.Errorf("%w: decode slot %q: %w", ErrCannotCount, slot, err)
	}
	defer rows.Close()
	// The peek stops after the first record that ends at or past upto, so
	// it may include one transaction whose commit starts at or past upto:
	// that one is not skipped (a slot resumes with the first transaction
	// whose commit record starts at or after its confirmed position), so
	// Begin's commit LSN decides.
	dec := decoder.New()
	counting := false
	for rows.Next() {
		var (
			lsnText string
			data    []byte
		)
		if err := rows.Scan(&lsnText, &data); err != nil {
			return 0, fmt.Errorf("%w: decode slot %q: %w", ErrCannotCount, slot, err)
		}
		lsn, _ := parseLSN(lsnText)
		m, err := dec.Decode(lsn, data)
		if err != nil {
			return 0, fmt.Errorf("%w: decode slot %q: %w", ErrCannotCount, slot, err)
		}
		switch m := m.(type) {
		case *decoder.Begin:
			counting = upto == 0 || m.CommitLSN < upto
		case *decoder.Insert:
			if counting && outbox[m.Relation.QualifiedName()] {
				n++
			}
		case *decoder.Message:
			if counting && m.Transactional && ev.MessagePrefix != "" && m.Prefix == ev.MessagePrefix {
				n++
			}
		}
	}
	if err := rows.Err(); err != nil {
		return 0, fmt.Errorf("%w: decode slot %q: %w", ErrCannotCount, slot, err)
	}
	return n, nil
}

// TemporaryCopy copies slot into a temporary slot of conn's session
// (pg_copy_logical_replication_slot(..., temporary => true)) named
// prefix_<random>, so that it can be decoded without consuming slot or
// counting as decoding it in pg_stat_replication_slots. drop removes the
// copy (a cancelled ctx does not prevent it); the server drops it with the
// session anyway, so a crash leaves nothing behind. conn must be one
// session, not a pool.
func TemporaryCopy(ctx context.Context, conn Querier, slot, prefix string) (name string, drop func() error, err error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", nil, fmt.Errorf("slotctl: name a temporary copy of slot %q: %w", slot, err)
	}
	name = prefix + "_" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2, true)`, slot, name); err != nil {
		return "", nil, fmt.Errorf("slotctl: copy slot %q into the temporary slot %q: %w", slot, name, err)
	}
	drop = func() error {
		if _, err := conn.Exec(context.WithoutCancel(ctx), `SELECT pg_drop_replication_slot($1)`, name); err != nil {
			return fmt.Errorf("slotctl: drop the temporary slot %q (it goes when this session ends): %w", name, err)
		}
		return nil
	}
	return name, drop, nil
}

// Advance moves the slot named slot forward to to with
// pg_replication_slot_advance and returns its new confirmed position. The
// server does not move a slot past its current WAL position (see
// CurrentWALLSN): the new position may be before to. Every event of a
// transaction whose commit record starts before the new position is never
// streamed from this slot (see CountEvents).
//
// Refusals: ErrAdvanceBackwards (naming the current position) if to is
// before the slot's confirmed_flush_lsn; ErrSlotActive (naming the pid)
// if a process streams from it. ErrSlotNotFound if it is missing.
// The advance is one server call: if slotctl dies during it, the slot is
// either where it was or at the new position, nothing in between.
func Advance(ctx context.Context, conn Querier, slot string, to pglogrepl.LSN) (pglogrepl.LSN, error) {
	s, err := Inspect(ctx, conn, slot)
	if err != nil {
		return 0, err
	}
	if err := CheckAdvance(s, to); err != nil {
		return 0, err
	}
	var end string
	err = conn.QueryRow(ctx, `SELECT end_lsn::text FROM pg_replication_slot_advance($1, $2::pg_lsn)`, slot, to.String()).Scan(&end)
	switch sqlState(err) {
	case "":
		if err != nil {
			return 0, fmt.Errorf("slotctl: advance slot %q to %s: %w", slot, to, err)
		}
		return pglogrepl.ParseLSN(end)
	case codeObjectInUse: // became active since Inspect
		return 0, slotActiveError(slot, 0, err)
	case codeUndefinedObject:
		return 0, fmt.Errorf("%w: slot %q: %w", ErrSlotNotFound, slot, err)
	case codeInsufficientPrivilege:
		return 0, fmt.Errorf("%w: advance slot %q: %w", ErrNoReplicationPrivilege, slot, err)
	default:
		return 0, fmt.Errorf("slotctl: advance slot %q to %s: %w", slot, to, err)
	}
}

// CheckAdvance says whether slot s may be advanced to to: ErrSlotActive
// while a process streams from it, ErrAdvanceBackwards if to is before its
// confirmed_flush_lsn. Advance checks it again right before moving.
func CheckAdvance(s SlotInfo, to pglogrepl.LSN) error {
	if s.Active {
		return fmt.Errorf("%w; nothing was advanced", slotActiveError(s.Name, s.ActivePID, nil))
	}
	if to < s.ConfirmedFlushLSN {
		return fmt.Errorf("%w: slot %q is confirmed up to %s and %s is before it; give a position at or after %s "+
			"(to stream older events again, use walbox replay from a trailing slot, or re-publish them from the outbox table)",
			ErrAdvanceBackwards, s.Name, s.ConfirmedFlushLSN, to, s.ConfirmedFlushLSN)
	}
	return nil
}

// CopySlot copies the logical slot named src into a new permanent slot
// named dst (pg_copy_logical_replication_slot) with the same plugin and
// confirmed position, and returns the copy. Streaming from the copy starts
// where src would resume; the copy retains WAL from src's restart_lsn on,
// until it is dropped or consumed. ErrSlotExists if dst is taken;
// ErrSlotNotFound if src is missing. One server call: if slotctl dies
// during it, the copy either exists whole or not at all.
func CopySlot(ctx context.Context, conn Querier, src, dst string) (SlotInfo, error) {
	if err := ValidateSlotName(src); err != nil {
		return SlotInfo{}, err
	}
	if err := ValidateSlotName(dst); err != nil {
		return SlotInfo{}, err
	}
	if _, err := Inspect(ctx, conn, src); err != nil {
		return SlotInfo{}, err
	}
	if _, err := Inspect(ctx, conn, dst); err == nil {
		return SlotInfo{}, fmt.Errorf("%w: slot %q already exists; choose another name with --to, or drop it first (`slotctl drop --slot %s`)",
			ErrSlotExists, dst, dst)
	} else if !errors.Is(err, ErrSlotNotFound) {
		return SlotInfo{}, err
	}
	_, err := conn.Exec(ctx, `SELECT pg_copy_logical_replication_slot($1, $2, false)`, src, dst)
	switch sqlState(err) {
	case "":
		if err != nil {
			return SlotInfo{}, fmt.Errorf("slotctl: copy slot %q to %q: %w", src, dst, err)
		}
		return Inspect(ctx, conn, dst)
	case codeDuplicateObject: // created concurrently
		return SlotInfo{}, fmt.Errorf("%w: slot %q: %w", ErrSlotExists, dst, err)
	case codeUndefinedObject:
		return SlotInfo{}, fmt.Errorf("%w: slot %q: %w", ErrSlotNotFound, src, err)
	case codeConfigLimitExceeded:
		return SlotInfo{}, fmt.Errorf("%w: all max_replication_slots are in use; drop unused ones or raise max_replication_slots and restart PostgreSQL: %w",
			ErrNoReplicationSlots, err)
	case codeInsufficientPrivilege:
		return SlotInfo{}, fmt.Errorf("%w: copy slot %q: %w", ErrNoReplicationPrivilege, src, err)
	default:
		return SlotInfo{}, fmt.Errorf("slotctl: copy slot %q to %q: %w", src, dst, err)
	}
}
