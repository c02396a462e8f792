package pipeline

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// FastRetryWindow is how long after a replication session that streamed
// ends walbox keeps reconnecting at the floor of the backoff
// (--reconnect-backoff-min) instead of doubling the delay: a failover
// manager takes tens of seconds to promote a standby (Patroni: up to its
// ttl plus loop_wait, 30 s + 10 s by default), and the first event
// written on the new primary should not then wait for a backoff that
// grew to 30 s meanwhile. Past it, against a server still down, the delay
// doubles as before, so a server down for good is not hammered.
const FastRetryWindow = 2 * time.Minute

// NotPrimaryRetryWindow bounds how long walbox keeps reconnecting at the
// floor of the backoff while the servers answer but none is a writable
// primary yet (read-only, in recovery, starting up: a standby about to be
// promoted). Each such attempt costs the server one short connection.
const NotPrimaryRetryWindow = 10 * time.Minute

// reconnectSchedule chooses the delay before each reconnect of the relay:
// the floor of the backoff (lo, jittered) within FastRetryWindow of a lost
// session and, up to NotPrimaryRetryWindow, while the last attempt reached
// a server that is not a writable primary; the capped exponential backoff
// otherwise. It belongs to the goroutine of Relay.Run.
type reconnectSchedule struct {
	lo, hi time.Duration
	// lostAt is when the last session that streamed ended; zero before.
	lostAt time.Time
	// notPrimarySince is when the attempts in a row that reached a
	// server answering "not a writable primary" began; zero otherwise.
	notPrimarySince time.Time
	// attempt counts the doubling steps since the last session streamed,
	// tries every attempt since then (for the log).
	attempt, tries int
}

// HealthySession is how long a session must have streamed for its loss to
// start a new FastRetryWindow. A session that fails sooner (a walsender
// that errors on the same WAL every time, a failure right after the
// start) is one more failed attempt: walbox would otherwise reconnect, and
// decode from the slot again, at the floor of the backoff for good.
const HealthySession = 10 * time.Second

// sessionLost records that a session that began streaming at began ended
// at now: if it streamed for HealthySession (or is the first lost), the
// attempts that follow start fast again.
func (s *reconnectSchedule) sessionLost(began, now time.Time) {
	if !s.lostAt.IsZero() && now.Sub(began) < HealthySession {
		return
	}
	s.lostAt = now
	s.attempt, s.tries = 0, 0
}

// next returns the delay before the next attempt, after one that failed
// with err at now, and whether it is a fast retry.
func (s *reconnectSchedule) next(now time.Time, err error) (time.Duration, bool) {
	s.tries++
	if notPrimary(err) {
		if s.notPrimarySince.IsZero() {
			s.notPrimarySince = now
		}
	} else {
		s.notPrimarySince = time.Time{}
	}
	fast := (!s.lostAt.IsZero() && now.Sub(s.lostAt) < FastRetryWindow) ||
		(!s.notPrimarySince.IsZero() && now.Sub(s.notPrimarySince) < NotPrimaryRetryWindow)
	if fast {
		return Backoff(0, s.lo, s.hi), true
	}
	d := Backoff(s.attempt, s.lo, s.hi)
	s.attempt++
	return d, false
}

// notPrimary reports an attempt that reached a server which answered but
// cannot serve walbox yet: read-only or in hot standby
// (target_session_attrs), starting up, shutting down or in recovery
// (SQLSTATE 57P03), or refusing a write (25006). A standby about to be
// promoted answers so.
func notPrimary(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, pgconn.ErrReadOnlyConnection) || errors.Is(err, pgconn.ErrStandbyConnection) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == "57P03" || pgErr.Code == "25006") {
		return true
	}
	// pgconn joins the errors of every host of a multi-host DSN into
	// one message; the read-only host's is among them.
	msg := err.Error()
	for _, s := range []string{pgconn.ErrReadOnlyConnection.Error(), pgconn.ErrStandbyConnection.Error(), "(SQLSTATE 57P03)"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// explainSlotWALGone adds the cause and the recovery to the server's
// "requested WAL segment ... has already been removed" (SQLSTATE 58P01)
// while decoding slot, which otherwise stops walbox with the server's words
// only. With Patroni it follows a failover to a replica whose copy of the
// slot was made before the replica had that WAL; other errors are returned
// as they are.
func explainSlotWALGone(err error, slot string) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "58P01" || !strings.Contains(pgErr.Message, "requested WAL segment") {
		return err
	}
	return fmt.Errorf("%w; slot %q needs WAL this server no longer has (its restart_lsn is older than the oldest WAL file), so it cannot be decoded here and its events from that point on cannot be streamed. "+
		"After a failover this is a copy of the slot made before the promoted standby had that WAL: Patroni copies a slot to a replica with the primary's restart_lsn and moves the copy only as the primary's slot moves, "+
		"so a replica that joined shortly before the failover may hold such a copy (docs/patroni.md); on one server, the WAL was removed past max_slot_wal_keep_size. "+
		"Recover as for a vanished slot: drop the slot (`slotctl drop --slot %s`; under Patroni it is then created again by Patroni, else create it with `slotctl create`), "+
		"then re-publish the outbox rows committed since the last event your consumers received (docs/slots.md, \"If the slot vanished\")",
		err, slot, slot)
}
