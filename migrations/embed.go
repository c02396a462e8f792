// Package migrations ships the SQL files of this directory inside Go
// programs (the demo and the tests apply the same files users do).
package migrations

import "embed"

// FS holds 001_outbox.sql, 002_publication.sql, 003_walbox_role.sql,
// 004_emit_message_privilege.sql and 005_heartbeat_function.sql.
//
//go:embed *.sql
var FS embed.FS
