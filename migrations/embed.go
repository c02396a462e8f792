// Package migrations ships the SQL files of this directory inside Go
// programs (the demo and the tests apply the same files users do).
package migrations

import "embed"

// FS holds 001_outbox.sql, 002_publication.sql, 003_walbox_role.sql and
// 004_emit_message_privilege.sql.
//
//go:embed *.sql
var FS embed.FS
