package pipeline

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Values of Config.Origin, pgoutput's origin parameter.
const (
	// OriginAny streams every change, whatever its replication origin
	// (pgoutput's default).
	OriginAny = "any"
	// OriginNone streams only changes made on this server: changes applied
	// by logical replication from another server (they carry a
	// replication origin) are filtered out by the server. PostgreSQL 16+.
	OriginNone = "none"
)

// Origins lists the valid Config.Origin values ("" is OriginAny).
var Origins = []string{OriginAny, OriginNone}

// originMinMajor is the first PostgreSQL major version whose pgoutput
// accepts the origin parameter; older ones fail START_REPLICATION on it.
const originMinMajor = 16

// validateOrigin checks Config.Origin.
func validateOrigin(origin string) error {
	switch origin {
	case "", OriginAny, OriginNone:
		return nil
	}
	return fmt.Errorf("pipeline: origin %q is neither %s nor %s", origin, OriginAny, OriginNone)
}

// withOrigin adds pgoutput's origin parameter to START_REPLICATION's
// arguments when Config.Origin asks for filtering. pgoutput before
// PostgreSQL 16 has no such parameter and would fail with "unrecognized
// pgoutput option": walbox says instead that the server cannot filter, so
// that no replicated change is relayed silently.
func (r *Relay) withOrigin(conn *pgconn.PgConn, args []string) ([]string, error) {
	if r.cfg.Origin == "" || r.cfg.Origin == OriginAny {
		return args, nil
	}
	v := conn.ParameterStatus("server_version")
	major, _ := strconv.Atoi(strings.SplitN(strings.TrimSpace(v), ".", 2)[0])
	if major < originMinMajor {
		return nil, fmt.Errorf("pipeline: origin %q needs PostgreSQL %d or later, and the server is %q: pgoutput cannot filter changes by replication origin there; "+
			"remove --pg-origin (Debezium: the origin of slot.stream.params), accepting that changes replicated from another server are relayed too",
			r.cfg.Origin, originMinMajor, v)
	}
	return append(args, "origin '"+r.cfg.Origin+"'"), nil
}
