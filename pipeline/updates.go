package pipeline

import (
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/decoder"
)

// The policies for an UPDATE of an outbox table (Config.OutboxUpdates),
// named as Debezium's table.op.invalid.behavior names them.
const (
	OutboxUpdatesWarn  = "warn"
	OutboxUpdatesError = "error"
	OutboxUpdatesFatal = "fatal"
)

// ErrOutboxUpdate is returned when an outbox table was updated and the
// policy is OutboxUpdatesFatal.
var ErrOutboxUpdate = errors.New("an outbox table was updated")

// outboxUpdate applies the policy to an UPDATE of an outbox table. An
// outbox is append-only: an update usually means a polling relay still
// marks rows as sent, or a writer fixes events in place, and the changed
// row is never sent again. Debezium's EventRouter treats it the same way.
func (l *loop) outboxUpdate(rel *decoder.Relation, lsn pglogrepl.LSN) error {
	l.metrics.outboxUpdates.Inc()
	msg := "an outbox row was updated; updates are not events and are not sent (is a polling relay still marking rows as sent?)"
	attrs := []any{"table", rel.QualifiedName(), "lsn", lsn.String(), "policy", l.cfg.OutboxUpdates}
	switch l.cfg.OutboxUpdates {
	case OutboxUpdatesWarn:
		l.log.Warn(msg, attrs...)
	case OutboxUpdatesError:
		l.log.Error(msg, attrs...)
	case OutboxUpdatesFatal:
		// Nothing at or after this change is confirmed, so a restart meets
		// it again: the operator decides, as with Debezium's fatal.
		return fmt.Errorf("%w: %s at lsn %s (table.op.invalid.behavior=fatal); stop the writer that updates it, then either set the policy to warn or error, or move the slot past it with `slotctl advance` after checking what the update changed", ErrOutboxUpdate, rel.QualifiedName(), lsn)
	default:
		l.log.Debug(msg, attrs...)
	}
	return nil
}
