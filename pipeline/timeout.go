package pipeline

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// receiveTimeout returns the receive timeout of a session on conn:
// Config.ReceiveTimeout, raised to the server's wal_sender_timeout when that
// is longer.
//
// While the walsender works through a large transaction of a table outside
// the publication it sends nothing; from PostgreSQL 15 (and the minor
// releases that back-patched the fix) it reads the client's replies and
// answers a requested one about every wal_sender_timeout/2. Giving up a
// connection sooner than the server's own cadence allows makes the server
// decode the same transaction again on the next connection, and again: the
// slot never passes it. The server's value is read on every connection
// (SHOW works on a replication connection) and logged when it changes the
// timeout, with both values.
func (r *Relay) receiveTimeout(ctx context.Context, conn *pgconn.PgConn) time.Duration {
	configured := r.cfg.ReceiveTimeout
	qctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	wst, err := walSenderTimeout(qctx, conn)
	first := !r.timeoutLogged
	r.timeoutLogged = true
	switch {
	case err != nil:
		if first {
			r.log.Warn("could not read the server's wal_sender_timeout; keeping the configured receive timeout, which may be shorter than the silence of a server decoding a large transaction",
				"err", err, "receive_timeout", configured.String())
		}
		return configured
	case wst == 0:
		// Disabled: the server never times out and answers requested
		// replies while it decodes; only the configured value bounds the
		// wait.
		if first {
			r.log.Info("the server's wal_sender_timeout is 0 (disabled); keeping the configured receive timeout",
				"receive_timeout", configured.String())
		}
		return configured
	case wst > configured:
		if first {
			r.log.Info("raising the receive timeout to the server's wal_sender_timeout: the server may be silent that long while it decodes a large transaction",
				"receive_timeout", configured.String(), "wal_sender_timeout", wst.String())
		}
		return wst
	}
	return configured
}

// walSenderTimeout reads wal_sender_timeout over conn with the simple query
// protocol, the only one a replication connection speaks.
func walSenderTimeout(ctx context.Context, conn *pgconn.PgConn) (time.Duration, error) {
	results, err := conn.Exec(ctx, "SHOW wal_sender_timeout").ReadAll()
	if err != nil {
		return 0, fmt.Errorf("SHOW wal_sender_timeout: %w", err)
	}
	if len(results) != 1 || len(results[0].Rows) != 1 || len(results[0].Rows[0]) != 1 {
		return 0, errors.New("SHOW wal_sender_timeout: unexpected result shape")
	}
	return parseGUCDuration(string(results[0].Rows[0][0]))
}

// parseGUCDuration parses a time setting as SHOW prints it: an integer and
// a unit ("60s", "1min", "500ms", "0"); no unit means milliseconds, the
// base unit of wal_sender_timeout.
func parseGUCDuration(s string) (time.Duration, error) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || i == 0 {
		return 0, fmt.Errorf("time setting %q: expected an integer and a unit such as 60s", s)
	}
	var unit time.Duration
	switch s[i:] {
	case "us":
		unit = time.Microsecond
	case "", "ms":
		unit = time.Millisecond
	case "s":
		unit = time.Second
	case "min":
		unit = time.Minute
	case "h":
		unit = time.Hour
	case "d":
		unit = 24 * time.Hour
	default:
		return 0, fmt.Errorf("time setting %q: unknown unit %q", s, s[i:])
	}
	if n > math.MaxInt64/int64(unit) {
		return 0, fmt.Errorf("time setting %q: out of range", s)
	}
	return time.Duration(n) * unit, nil
}
