package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/twmb/franz-go/pkg/kerr"
)

// ProduceError is a record Kafka refused for good (franz-go retries the
// transient failures itself). The slot is not confirmed past it, so after
// the cause is fixed a restart sends it again.
type ProduceError struct {
	Topic   string
	EventID string
	LSN     pglogrepl.LSN
	// Checked is set when walbox refused the record before producing it,
	// on Kafka's behalf (a record larger than its topic's limit): nothing
	// after it was produced.
	Checked bool
	Err     error
}

func (e *ProduceError) Error() string {
	verb := "kafka refused"
	if e.Checked {
		verb = "kafka would refuse" // decided before producing: it was never sent
	}
	return fmt.Sprintf("%s event %q (lsn %s) for topic %q: %v; %s; the slot is not confirmed past it, so a restart after the fix sends it again",
		verb, e.EventID, e.LSN, e.Topic, e.Err, produceHint(e.Err))
}

// produceHint says what to do about the refusals operators meet.
func produceHint(err error) string {
	switch {
	case errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return "the topic does not exist and the broker does not create topics automatically: create it, or enable auto.create.topics.enable on the brokers"
	case errors.Is(err, kerr.MessageTooLarge), errors.Is(err, kerr.RecordListTooLarge):
		return "the record is larger than the topic's max.message.bytes or --producer-batch-max-bytes: store large payloads elsewhere and send a reference, raise the limits, or set --invalid-rows=dead-letter to divert such rows"
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		return "the Kafka principal lacks permission: grant WRITE (and IDEMPOTENT_WRITE on the cluster for older brokers) to walbox's principal"
	case errors.Is(err, kerr.InvalidTimestamp):
		return "the record's timestamp is its row's commit time, and the topic refuses timestamps that far from the broker's clock: message.timestamp.before.max.ms (message.timestamp.difference.max.ms before Kafka 4.0) is shorter than walbox's lag or the age of the range walbox replay sends, or message.timestamp.after.max.ms is shorter than the database's clock is ahead of the broker's; raise the setting on the topic (kafka-configs --alter --entity-type topics --entity-name <topic> --add-config message.timestamp.before.max.ms=<ms>), or set message.timestamp.type=LogAppendTime there, which stamps the append time instead of the commit time, and keep the clocks on NTP"
	case errors.Is(err, kerr.InvalidTopicException):
		return "Kafka rejects the topic name: check --topic and the routed column values"
	default:
		return "check the broker logs"
	}
}

func (e *ProduceError) Unwrap() error { return e.Err }

// IsRetryable classifies an error from a replication session: true means
// reconnecting may cure it, false means walbox must stop and say why.
func IsRetryable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, errSlotActive) {
		// A standby's check before START_REPLICATION: as 55006 below.
		return true
	}
	var standby *standbyServerError
	if errors.As(err, &standby) {
		// The connection reached a standby (whatever it refused, 55000
		// included): the next one may reach the primary (a multi-host
		// DSN, a DNS name or VIP that moves), or the standby be promoted.
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "55006":
			// object_in_use: the slot is still active, usually held by a
			// predecessor that was just killed and whose walsender has not
			// noticed yet. It frees itself within wal_sender_timeout.
			return true
		case "57P01", "57P02", "57P03":
			// admin_shutdown, crash_shutdown, cannot_connect_now: the server
			// is restarting or in recovery.
			return true
		case "53300":
			// too_many_connections: transient by nature.
			return true
		}
		// Connection exceptions (class 08) are transient; any other SQL
		// error (missing slot, bad publication, lost WAL) needs a human.
		return len(pgErr.Code) == 5 && pgErr.Code[:2] == "08"
	}
	var produceErr *ProduceError
	if errors.As(err, &produceErr) {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) {
		// Connect failures carry the server's error: a PgError above is
		// already classified, anything else is the network.
		return true
	}
	var lost *connectionLostError
	if errors.Is(err, ErrSpoolUnwritable) && !errors.As(err, &lost) {
		// A disk fault of the spool (ENOSPC, EACCES, EROFS, ENOTDIR,
		// EMFILE) wraps a syscall.Errno, which passes for a net.Error:
		// it is none. The loop turns it into a reconnect with protocol
		// version 1 (unstreamable); one that reaches here came from
		// where that cannot help.
		return false
	}
	var netErr net.Error
	if errors.As(err, &netErr) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) {
		return true
	}
	return errors.As(err, &lost)
}

// standbyServerError ends a session whose replication connection reached a
// server in recovery (a hot standby) while walbox was not told to decode
// from one (Config.DecodeFromStandby): nothing it says about its WAL is
// taken for the primary's, and the relay reconnects.
type standbyServerError struct {
	host     string
	timeline int32
	walEnd   pglogrepl.LSN
	// err is START_REPLICATION's refusal, when the standby got that far.
	err error
}

func (e *standbyServerError) Error() string {
	msg := fmt.Sprintf("the replication connection reached %s, a standby (in recovery, timeline %d, WAL replayed up to %s), not the primary; walbox keeps reconnecting until it reaches the primary and takes nothing from the standby's WAL for a failover. "+
		"Add target_session_attrs=read-write to a multi-host --pg-dsn, or point the DNS name or VIP at the primary; to decode from a standby on purpose (PostgreSQL 16+), set --heartbeat-interval=0",
		e.host, e.timeline, e.walEnd)
	if e.err != nil {
		msg += ": " + e.err.Error()
	}
	return msg
}

func (e *standbyServerError) Unwrap() error { return e.err }

// isPrerequisiteState reports SQLSTATE 55000 (object_not_in_prerequisite_state).
func isPrerequisiteState(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55000"
}

// connectionLostError marks a failure of the replication connection itself
// (as opposed to the data on it), which pgconn does not always expose as a
// net.Error once it has closed the socket.
type connectionLostError struct{ err error }

func (e *connectionLostError) Error() string { return "replication connection lost: " + e.err.Error() }
func (e *connectionLostError) Unwrap() error { return e.err }

// isSlotBusy reports SQLSTATE 55006 (object_in_use) on START_REPLICATION.
func isSlotBusy(err error) bool {
	var pgErr *pgconn.PgError
	return errors.Is(err, errSlotActive) || (errors.As(err, &pgErr) && pgErr.Code == "55006")
}

// errSlotActive is what a standby's session ends with when it found the
// slot active in pg_replication_slots and opened no walsender (standby.go):
// the slot is busy, as with SQLSTATE 55006.
var errSlotActive = errors.New("the slot is active in pg_replication_slots (held by another process)")

// ErrHistoryMismatch is wrapped by the error walbox stops with in
// exactly-once mode when the position the state topic holds for its
// transactional id belongs to another database history (HistoryMismatchError).
var ErrHistoryMismatch = errors.New("exactly-once state from another database history")

// HistoryMismatchError reports a committed position that walbox must not
// trust: it was recorded on another Postgres cluster, database, slot or
// branch of timelines (resumeFrom). Skipping the transactions it seems to
// cover would lose this database's events, so the relay stops before it
// confirms anything.
type HistoryMismatchError struct {
	TransactionalID string
	StateTopic      string
	// State is the history recorded with the position, which ends at
	// StateLSN; Server is the server's, whose WAL ends at ServerWALEnd.
	State        History
	StateLSN     pglogrepl.LSN
	Server       History
	ServerWALEnd pglogrepl.LSN
	Reason       string
}

func (e *HistoryMismatchError) Error() string {
	return fmt.Sprintf("%v: the state topic %q holds, for transactional id %q, a committed position that does not belong to this database: %s. "+
		"State: %s, position %s; this server: %s, WAL up to %s. "+
		"Skipping by that position would lose this database's transactions, so walbox does not start and confirms nothing. "+
		"If the database is new, restored or rebuilt, or another cluster uses the same slot name on this Kafka, give this walbox a transactional id of its own (--transactional-id) or another --state-topic; "+
		"the events Kafka holds under the old id stay as they are",
		ErrHistoryMismatch, e.StateTopic, e.TransactionalID, e.Reason, e.State, e.StateLSN, e.Server, e.ServerWALEnd)
}

func (e *HistoryMismatchError) Unwrap() error { return ErrHistoryMismatch }

// ErrStateTopic is wrapped by the error walbox stops with in exactly-once
// mode when the state topic exists with settings that lose or hide
// positions (StateTopicError).
var ErrStateTopic = errors.New("exactly-once state topic unusable")

// StateTopicError reports an existing state topic with several partitions
// or a cleanup policy other than compact.
type StateTopicError struct {
	Topic   string
	Problem string
}

func (e *StateTopicError) Error() string {
	return fmt.Sprintf("%v: state topic %q: %s. Point --state-topic at a topic with 1 partition and cleanup.policy=compact (walbox creates a missing one so), or fix this one "+
		"(kafka-configs --alter --entity-type topics --entity-name %s --add-config cleanup.policy=compact); "+
		"a new, empty state topic makes the first start produce again what the slot sends from its confirmed position",
		ErrStateTopic, e.Topic, e.Problem, e.Topic)
}

func (e *StateTopicError) Unwrap() error { return ErrStateTopic }

// ErrTransactionTimeout is wrapped by TransactionTimeoutError.
var ErrTransactionTimeout = errors.New("transaction timeout above the brokers' limit")

// TransactionTimeoutError reports a transaction timeout (Config.
// TransactionTimeout) above the brokers' transaction.max.timeout.ms, which
// the brokers refuse.
type TransactionTimeoutError struct {
	Timeout, BrokerMax time.Duration
}

func (e *TransactionTimeoutError) Error() string {
	return fmt.Sprintf("%v: --transaction-timeout %s is above the brokers' transaction.max.timeout.ms (%s), so they would refuse every transaction: lower --transaction-timeout to at most %s, or raise transaction.max.timeout.ms on the brokers",
		ErrTransactionTimeout, e.Timeout, e.BrokerMax, e.BrokerMax)
}

func (e *TransactionTimeoutError) Unwrap() error { return ErrTransactionTimeout }
