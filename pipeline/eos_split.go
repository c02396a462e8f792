package pipeline

import (
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pglogrepl"
)

// Splitting a Postgres transaction across Kafka transactions.
//
// A Kafka transaction open longer than the transaction timeout is aborted
// by the broker. A Postgres transaction whose records take longer than that
// to produce (millions of rows, or a slow Kafka) could then never be
// delivered whole: every attempt is aborted, the session restarts from the
// committed position and meets the same transaction again, while the slot
// holds WAL. So a Kafka transaction that reaches, inside a Postgres
// transaction, TransactionSplitRecords records or half the transaction
// timeout is committed there (splitDue), with a state record naming
// the position inside the Postgres transaction: its commit LSN (known from
// its Begin) and how many of its changes the committed Kafka transactions
// hold (SplitPosition). The rest of it goes into the next Kafka
// transaction, which may be split again.
//
// A restart (a crash, a session ended, a timeout abort) starts the slot at
// or before the end of the last whole Postgres transaction committed; the
// server sends the split one again from its Begin, in the same order, and
// the loop skips its changes below the recorded count (skips) and
// produces the rest: read_committed consumers see every row once.
//
// The count names the same prefix only if the server sends the same
// changes and messages again: it decodes them from the same WAL, but what
// it sends depends on the session's options too. Logical decoding
// messages come only with messages 'true', which at least once asks for
// only with a message prefix or heartbeats; exactly-once always asks for
// them, so that a restart with other options (heartbeats turned off, say)
// does not skip one outbox row more than was committed for each message
// the first run was sent. The publication must not change while a split
// position is pending either: its tables' inserts are counted. A
// streaming mode (protocol 2) that spools a transaction and replays it at
// Stream Commit keeps the count only if the replay is what a non-streamed
// decoding sends: the changes of aborted subtransactions dropped (Stream
// Abort), messages outside the transaction's stream blocks not counted,
// Begin carrying the commit LSN; the server decides anew on each decoding
// whether to stream a transaction.
//
// The slot is never confirmed inside a Postgres transaction: a split
// commit makes only the whole Postgres transactions before the split one
// confirmable (the state record's end_lsn).
//
// What read_committed consumers see: the rows of such a Postgres
// transaction appear in several Kafka transactions, in order; a consumer
// may see its first part before the rest is committed. Per-key order holds,
// as every record is produced in stream order by one producer.

// splitDue is when the open Kafka transaction, which ends inside a
// Postgres transaction, must be committed there: now once it holds
// TransactionSplitRecords records, or at half the transaction timeout from
// when it opened (the broker's timer starts a little later, with the first
// record it receives). Zero when it cannot be split where it is: the last
// record is not a change of a Postgres transaction.
func (e *eosState) splitDue() time.Time {
	if e.unitRecords == 0 || e.unitKey.ord == nonTransactional || e.unitKey.commit == 0 {
		return time.Time{}
	}
	if e.splitRecords > 0 && e.records >= e.splitRecords {
		return e.began
	}
	if e.timeout > 0 {
		return e.began.Add(e.timeout / 2)
	}
	return time.Time{}
}

// splitPosition turns the commit being started into one inside the
// Postgres transaction being received, if the open Kafka transaction ends
// inside one: it then covers the whole Postgres transactions before it
// (or, if it holds none, the last position committed) and the changes of
// the split one up to the last record produced.
func (e *eosState) splitPosition(c *pendingCommit) {
	if e.unitRecords == 0 {
		return
	}
	if c.covered.EndLSN == 0 {
		c.covered = e.base
	}
	c.covered.Split = SplitPosition{CommitLSN: e.unitKey.commit, Changes: e.unitKey.ord + 1}
	reason := "records"
	if e.records < e.splitRecords {
		reason = "age"
	}
	e.log.Info("exactly-once: committing a kafka transaction inside a postgres transaction too large for one; the position inside it is recorded",
		"transactional_id", e.txnID, "commit_lsn", c.covered.Split.CommitLSN.String(), "changes", c.covered.Split.Changes,
		"records", c.records, "reason", reason, "open_for", time.Since(e.began).Round(time.Millisecond).String(),
		"transaction_timeout", e.timeout.String())
	// The next Kafka transaction starts with no record of this Postgres
	// transaction yet.
	e.unitRecords = 0
}

// resumeSplit decides what the split part of a committed position means
// on the server walbox streams from (resumeFrom decides the rest): the
// prefix of a Postgres transaction to skip, or none. A split position is
// checked like a whole one, as if it ended just after the commit LSN of
// its Postgres transaction: one from another history is refused, one on an
// ancestor timeline is trusted only if that transaction committed before
// the switch point (the new timeline may reuse its LSNs for other
// transactions).
func resumeSplit(pos StatePosition, srv serverHistory, skipEnd pglogrepl.LSN) (SplitPosition, string, error) {
	s := pos.Split
	if s.IsZero() {
		return SplitPosition{}, "", nil
	}
	probe := StatePosition{CommitLSN: s.CommitLSN, EndLSN: s.CommitLSN + 1, History: pos.History}
	end, _, err := resumeFrom(probe, srv)
	if err != nil {
		var hm *HistoryMismatchError
		if errors.As(err, &hm) {
			hm.StateLSN = s.CommitLSN
		}
		return SplitPosition{}, "", err
	}
	if end != probe.EndLSN || skipEnd != pos.EndLSN {
		return SplitPosition{}, fmt.Sprintf("exactly-once: the committed position inside the postgres transaction committing at %s (its first %d changes) is not in this server's history (the server switched timelines before it): nothing is skipped by it, and Kafka holds those changes of the old timeline",
			s.CommitLSN, s.Changes), nil
	}
	return s, "", nil
}
