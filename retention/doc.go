// Package retention keeps a trailing replication slot: a second pgoutput
// slot that follows walbox's live slot about a window behind, so that the
// WAL (and the catalog rows) needed to decode the last window stay on the
// server and `walbox replay` can stream any range of it again.
//
// Which position was confirmed when is known from a History kept in memory:
// walbox writes nothing to the database for it. After a start, until the
// history reaches a window back, the keeper of the active instance reads
// the trailing slot's own stream instead (peeking, which moves nothing)
// and advances it past the transactions that committed at least the window
// ago, a bounded piece per step (Config.ScanBytes). So restarts, however
// frequent, do not stop it.
//
// Invariants, whatever happens between two steps (a crash, a dropped
// connection): the trailing slot never moves backwards, and never past the
// position the live slot has confirmed on the server. Both are enforced in
// the single SQL statement that advances it (see Advance).
package retention
