// Package snapshot takes over from a polling relay: on a database where
// walbox's slot does not exist yet it creates the slot with an exported
// snapshot, reads the outbox rows still pending in that snapshot, produces
// them as the WAL path would, waits for every ack, and only then lets the
// relay stream from the slot's consistent point. Rows committed before the
// slot existed come from the snapshot, rows committed after from the WAL;
// none from both, and per aggregate the snapshot's rows come first.
//
// "Snapshot pending" is recorded without writing to the outbox: the
// publication's comment says "walbox: slot <slot> snapshot pending" (with
// "from <LSN>", the slot's consistent point, once the slot exists) from
// before the slot is created until every snapshot record is acknowledged
// (see SnapshotMarker). A start that finds the marker with the slot present
// knows the previous snapshot did not finish; its exported snapshot died
// with its connection, so the slot is dropped and created again and the
// snapshot taken again from the start (rows sent before are sent again, in
// the same order). That is safe only while nothing was confirmed on the
// slot, which Takeover checks against the recorded consistent point. A
// start that finds the slot without the marker takes no snapshot, whatever
// its configuration says.
//
// The package validates its own settings (ParseMode, CheckWhere,
// ParseOrder); config maps their errors to the options.
package snapshot
