package config

import (
	"fmt"
	"net/url"
	"strings"
)

// TransportWarnings lists the connections c makes that an attacker on the
// network path could read or redirect, each as a sentence for the log at
// start: a Postgres DSN whose sslmode (or PGSSLMODE, read with getenv)
// allows plaintext and no certificate check, an explicit DSN that drops
// the sslmode=verify-ca or verify-full of debeziumDSN (the DSN the
// Debezium configuration maps to, "" when none), and a SASL mechanism that
// sends its secret in clear without TLS. None includes a secret.
func (c Config) TransportWarnings(getenv func(string) string, debeziumDSN string) []string {
	var out []string
	if w := pgTransportWarning(c.PGDSN, getenv); w != "" {
		out = append(out, w)
	}
	if debeziumDSN != "" && c.PGDSN != debeziumDSN {
		want, _ := dsnParam(debeziumDSN, "sslmode")
		have, _ := dsnParam(c.PGDSN, "sslmode")
		if have == "" {
			have = getenv("PGSSLMODE")
		}
		if (want == "verify-full" || want == "verify-ca") && have != "verify-full" && have != want {
			out = append(out, fmt.Sprintf("--pg-dsn (given explicitly) replaces the DSN of the Debezium configuration, which had sslmode=%s, with sslmode=%s: "+
				"the server's certificate is no longer verified as before; add sslmode=%s and sslrootcert to --pg-dsn", want, orDefault(have), want))
		}
	}
	if w := c.KafkaSecurity.TransportWarning(); w != "" {
		out = append(out, w)
	}
	return out
}

func orDefault(mode string) string {
	if mode == "" {
		return "unset (pgx's default, prefer)"
	}
	return mode
}

// pgTransportWarning warns about a DSN whose effective sslmode is prefer
// (pgx's default when none is set) or allow: TLS only if the server
// offers it, with no certificate check, so anyone on the path can
// downgrade to plaintext or impersonate the server and read the password
// and the events. A Unix-socket host is local and gets none.
func pgTransportWarning(dsn string, getenv func(string) string) string {
	if dsn == "" || dsnUnixSocket(dsn) {
		return ""
	}
	mode, _ := dsnParam(dsn, "sslmode")
	how := "--pg-dsn sets sslmode=" + mode
	if mode == "" {
		mode = getenv("PGSSLMODE")
		how = "PGSSLMODE=" + mode
	}
	if mode == "" {
		mode, how = "prefer", "--pg-dsn sets no sslmode, so pgx uses prefer"
	}
	if mode != "prefer" && mode != "allow" {
		return ""
	}
	return how + ": TLS only if the server offers it and without verifying its certificate, so anyone on the network path can downgrade the connection to plaintext " +
		"or impersonate the server, and read the password and the events; set sslmode=verify-full with sslrootcert (or sslmode=disable where the network is trusted)"
}

// dsnUnixSocket reports whether dsn's host is a Unix socket directory:
// host=/dir, or a URL's percent-encoded host (postgres://u@%2Fdir/db).
func dsnUnixSocket(dsn string) bool {
	host, _ := dsnParam(dsn, "host")
	s := strings.TrimSpace(dsn)
	if p, ok := urlPrefix(s); ok && host == "" {
		auth := s[len(p):]
		if i := strings.IndexAny(auth, "/?#"); i >= 0 {
			auth = auth[:i]
		}
		if at := strings.LastIndexByte(auth, '@'); at >= 0 {
			auth = auth[at+1:]
		}
		host, _ = url.PathUnescape(auth)
	}
	return strings.HasPrefix(host, "/") || strings.HasPrefix(host, "@")
}

// dsnParam returns the value of key in dsn, a libpq URL (query parameter)
// or key=value DSN (values single-quoted or not, backslash escapes).
func dsnParam(dsn, key string) (string, bool) {
	s := strings.TrimSpace(dsn)
	if _, ok := urlPrefix(s); ok {
		u, err := url.Parse(s)
		if err != nil {
			return "", false
		}
		q := u.Query()
		return q.Get(key), q.Has(key)
	}
	for len(s) > 0 {
		s = strings.TrimLeft(s, asciiSpaces)
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "", false
		}
		k := strings.TrimRight(s[:eq], asciiSpaces)
		s = strings.TrimLeft(s[eq+1:], asciiSpaces)
		var v strings.Builder
		if strings.HasPrefix(s, "'") {
			i := 1
			for ; i < len(s) && s[i] != '\''; i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				v.WriteByte(s[i])
			}
			s = s[min(i+1, len(s)):]
		} else {
			i := 0
			for ; i < len(s) && !strings.ContainsRune(asciiSpaces, rune(s[i])); i++ {
				if s[i] == '\\' && i+1 < len(s) {
					i++
				}
				v.WriteByte(s[i])
			}
			s = s[i:]
		}
		if k == key {
			return v.String(), true
		}
	}
	return "", false
}
