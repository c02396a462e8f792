package inbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Inbox applies events once per consumer, recording their ids in an inbox
// table. Create it with New. Safe for concurrent use.
type Inbox struct {
	cfg       Config
	table     tableName
	insertSQL string
}

// New returns an Inbox for cfg (defaults applied). Errors wrap
// ErrInvalidConfig. It does not touch the database: create the table with
// Migrate or migrations/001_inbox.sql.
func New(cfg Config) (*Inbox, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	t, err := parseTable(cfg.Table)
	if err != nil {
		return nil, err
	}
	return &Inbox{
		cfg:   cfg,
		table: t,
		insertSQL: `INSERT INTO ` + t.sanitize() +
			` (consumer, event_id, topic, kafka_partition, kafka_offset) VALUES ($1, $2, $3, $4, $5)` +
			` ON CONFLICT (consumer, event_id) DO NOTHING`,
	}, nil
}

// Config returns the configuration with its defaults applied.
func (ib *Inbox) Config() Config { return ib.cfg }

// HandlerFunc applies one event's effect in tx. It must do its work through
// tx only (not another connection), or the effect is not undone with the
// inbox row.
type HandlerFunc func(ctx context.Context, tx pgx.Tx) error

// EventID returns rec's event id: the value of the configured header. A
// header that is missing or empty, or repeated with different values, is an
// error wrapping ErrMissingEventID that names the record's topic, partition
// and offset.
func (ib *Inbox) EventID(rec *kgo.Record) (string, error) {
	var id []byte
	found := false
	for _, h := range rec.Headers {
		if h.Key != ib.cfg.Header {
			continue
		}
		if found && !bytes.Equal(h.Value, id) {
			return "", fmt.Errorf("%w: record topic=%s partition=%d offset=%d has two %q headers, %q and %q; the producer must send one",
				ErrMissingEventID, rec.Topic, rec.Partition, rec.Offset, ib.cfg.Header, id, h.Value)
		}
		id, found = h.Value, true
	}
	if len(id) == 0 {
		what := "no"
		if found {
			what = "an empty"
		}
		return "", fmt.Errorf("%w: record topic=%s partition=%d offset=%d has %s %q header; check that the producer sets it, or set Config.Header to the header that carries the event id (walbox: event_id; walbox's Debezium-compatible records: id)",
			ErrMissingEventID, rec.Topic, rec.Partition, rec.Offset, what, ib.cfg.Header)
	}
	return string(id), nil
}

// Handle applies rec once, inside the caller's transaction tx. It inserts
// the event id into the inbox and, if the row is new, calls fn; if the id
// is already there (the event was applied before, by this consumer) it
// returns applied=false without calling fn.
//
// Both happen under a savepoint of tx: when fn (or the insert) fails, Handle
// rolls back to it, so neither fn's changes nor the inbox row survive,
// returns the error (wrapping fn's), and tx stays usable. The caller commits
// tx; until then nothing is recorded, so a crash before the commit lets the
// next delivery apply the event. Commit the Kafka offset only after tx
// committed.
//
// A record without a usable event id is refused with ErrMissingEventID
// before anything is written, and fn is not called.
func (ib *Inbox) Handle(ctx context.Context, tx pgx.Tx, rec *kgo.Record, fn HandlerFunc) (applied bool, err error) {
	id, err := ib.EventID(rec)
	if err != nil {
		return false, err
	}
	where := func() string {
		return fmt.Sprintf("inbox %s: event %q (topic=%s partition=%d offset=%d)", ib.table, id, rec.Topic, rec.Partition, rec.Offset)
	}
	sp, err := tx.Begin(ctx) // a savepoint
	if err != nil {
		return false, fmt.Errorf("%s: savepoint: %w", where(), err)
	}
	tag, err := sp.Exec(ctx, ib.insertSQL, ib.cfg.Consumer, id, rec.Topic, rec.Partition, rec.Offset)
	if err != nil {
		return false, rollback(ctx, sp, fmt.Errorf("%s: record the event id (did Migrate or 001_inbox.sql create the table?): %w", where(), err))
	}
	if tag.RowsAffected() == 0 {
		// Applied before: the row is there (committed), or another
		// transaction inserted it and committed while we waited on its lock.
		if err := sp.Commit(ctx); err != nil {
			return false, fmt.Errorf("%s: release savepoint: %w", where(), err)
		}
		return false, nil
	}
	if err := fn(ctx, sp); err != nil {
		return false, rollback(ctx, sp, fmt.Errorf("%s: handler: %w", where(), err))
	}
	if err := sp.Commit(ctx); err != nil {
		return false, fmt.Errorf("%s: release savepoint: %w", where(), err)
	}
	return true, nil
}

// rollback undoes the savepoint after err and returns err (joined with a
// failed rollback, after which the whole transaction is unusable).
func rollback(ctx context.Context, sp pgx.Tx, err error) error {
	if rbErr := sp.Rollback(context.WithoutCancel(ctx)); rbErr != nil {
		return errors.Join(err, fmt.Errorf("roll back to savepoint (the transaction is unusable; roll it back): %w", rbErr))
	}
	return err
}

// Beginner starts a transaction: *pgx.Conn, *pgxpool.Pool and pgx.Tx (a
// nested transaction) satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Process applies rec once in a transaction of its own: it begins one on db,
// calls Handle and commits, or rolls back when Handle fails. When Process
// returns nil the event has been applied, now or before (applied says which),
// and the record's offset may be committed. On an error the transaction did
// not commit, except when the commit itself failed on a lost connection, in
// which case it may have: either way, deliver the record again, and the inbox
// decides.
func (ib *Inbox) Process(ctx context.Context, db Beginner, rec *kgo.Record, fn HandlerFunc) (applied bool, err error) {
	tx, err := db.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("inbox %s: begin transaction for topic=%s partition=%d offset=%d: %w", ib.table, rec.Topic, rec.Partition, rec.Offset, err)
	}
	applied, err = ib.Handle(ctx, tx, rec, fn)
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx)) // Handle's error says why; a dead connection rolls back by itself
		return false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return false, fmt.Errorf("inbox %s: commit topic=%s partition=%d offset=%d (deliver the record again; the inbox applies it at most once): %w", ib.table, rec.Topic, rec.Partition, rec.Offset, err)
	}
	return applied, nil
}
