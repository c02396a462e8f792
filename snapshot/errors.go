package snapshot

import "errors"

// Sentinel errors; returned errors wrap one with the values involved and
// the fix.
var (
	// ErrInvalidConfig: a snapshot setting is malformed or the settings
	// contradict each other.
	ErrInvalidConfig = errors.New("snapshot: invalid configuration")
	// ErrMarkerPrivilege: the role may not comment on the publication, so
	// the snapshot's progress cannot be recorded.
	ErrMarkerPrivilege = errors.New("snapshot: not allowed to record the snapshot state on the publication")
	// ErrSnapshotPending: a previous start's snapshot did not finish and
	// this start cannot (or must not) redo it.
	ErrSnapshotPending = errors.New("snapshot: an earlier snapshot did not finish")
	// ErrSnapshotRepeated: a takeover of the slot already finished with the
	// same selection (recorded on the publication, see FinishedMarker), so
	// taking that snapshot again would re-send every row it selects that
	// walbox sent since (walbox never marks rows sent). Nothing is created.
	ErrSnapshotRepeated = errors.New("snapshot: this snapshot was already taken")
	// ErrProduce: Kafka refused a snapshot record; the snapshot is not
	// finished and is taken again on the next start.
	ErrProduce = errors.New("snapshot: kafka refused a snapshot record")
)
