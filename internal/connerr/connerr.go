// Package connerr words Postgres connection failures for the operator:
// walbox and slotctl print their fatal errors through Describe.
//
// pgconn reports a failed connection as a *pgconn.ConnectError joining the
// error of every attempt. With the default sslmode (prefer) pgx first tries
// TLS and then plaintext, so a server without TLS makes every failure read
// "tls error: server refused TLS connection" followed by the real cause,
// which sends the operator after TLS. Describe leaves that attempt out when
// a later plaintext attempt to the same server failed for another reason,
// and adds what to do about a missing or wrong password.
package connerr

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// refusedTLS ends the message of an attempt whose TLS request the server
// answered with "no" (pgconn's startTLS; it has no type to match).
const refusedTLS = "tls error: server refused TLS connection"

// codeInvalidPassword is SQLSTATE 28P01, invalid_password: the server's
// answer to a missing as well as a wrong password.
const codeInvalidPassword = "28P01"

// Describe returns err's message, with any *pgconn.ConnectError in its
// chain rewritten as described in the package doc. Other errors are
// returned as err.Error(). The message never holds more of the DSN than
// pgconn's does (user and database, not the password).
func Describe(err error) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	var ce *pgconn.ConnectError
	if !errors.As(err, &ce) || ce.Config == nil {
		return msg
	}
	msg = strings.Replace(msg, ce.Error(), connectMessage(ce), 1)
	if hint := passwordHint(ce); hint != "" {
		msg += "; " + hint
	}
	return msg
}

// connectMessage is ce.Error() without the refused TLS attempts that a
// later attempt to the same address followed (sslmode=prefer's fallback).
// When TLS was required, or refusing it was the only failure, it stays.
func connectMessage(ce *pgconn.ConnectError) string {
	joined, ok := ce.Unwrap().(interface{ Unwrap() []error })
	if !ok {
		return ce.Error()
	}
	attempts := joined.Unwrap()
	var kept []string
	for i, a := range attempts {
		if m := a.Error(); strings.HasSuffix(m, refusedTLS) && retried(address(m), attempts[i+1:]) {
			continue
		}
		kept = append(kept, a.Error())
	}
	if len(kept) == len(attempts) {
		return ce.Error()
	}
	// The form of pgconn's ConnectError.Error, with fewer attempts.
	prefix := fmt.Sprintf("failed to connect to `user=%s database=%s`:", ce.Config.User, ce.Config.Database)
	details := strings.Join(kept, "\n")
	if strings.Contains(details, "\n") {
		return prefix + "\n\t" + strings.ReplaceAll(details, "\n", "\n\t")
	}
	return prefix + " " + details
}

// address is the "host:port (name)" that starts an attempt's message, or
// "" when it has none.
func address(attempt string) string {
	if i := strings.Index(attempt, "): "); i >= 0 {
		return attempt[:i+1]
	}
	return ""
}

// retried reports whether one of later is an attempt to addr that did not
// fail on TLS.
func retried(addr string, later []error) bool {
	if addr == "" {
		return false
	}
	for _, l := range later {
		if m := l.Error(); address(m) == addr && !strings.HasSuffix(m, refusedTLS) {
			return true
		}
	}
	return false
}

// passwordHint says what to do when the server refused the password, or
// "" for any other failure.
func passwordHint(ce *pgconn.ConnectError) string {
	var pe *pgconn.PgError
	m := ce.Error()
	if !(errors.As(ce, &pe) && pe.Code == codeInvalidPassword) &&
		!strings.Contains(m, "password authentication failed") && !strings.Contains(m, "no password supplied") {
		return ""
	}
	role := roleSQL(ce.Config.User)
	if ce.Config.Password == "" {
		return fmt.Sprintf("the DSN gives no password for role %s: as a superuser set one with ALTER ROLE %s PASSWORD '...' "+
			"(or \\password %s in psql; see migrations/003_walbox_role.sql), then put it in the DSN "+
			"(postgres://%s:PASSWORD@HOST:5432/DB) or in a password file (passfile= in the DSN, or PGPASSFILE)",
			role, role, role, ce.Config.User)
	}
	return fmt.Sprintf("check the password for role %s in the DSN (or its password file); "+
		"a superuser can set it with ALTER ROLE %s PASSWORD '...'",
		role, role)
}

// plainRole is a role name SQL takes unquoted.
var plainRole = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// roleSQL is role as SQL a human copies: quoted only when it must be.
func roleSQL(role string) string {
	if plainRole.MatchString(role) {
		return role
	}
	return pgx.Identifier{role}.Sanitize()
}
