package inbox

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
// Migrate or the files of migrations/.
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
		// One statement records a whole batch: no savepoint, so no
		// subtransaction per record (see HandleBatch). ORDER BY n inserts
		// in the order of the arrays, which the caller sorts: every
		// transaction takes the rows' locks in the same order, so two
		// batches sharing events wait for each other instead of
		// deadlocking. The explicit conflict target makes a table whose key
		// lacks source (002_inbox_source.sql not applied) an error rather
		// than a silent skip of another source's event.
		insertSQL: `INSERT INTO ` + t.sanitize() +
			` (consumer, source, event_id, topic, kafka_partition, kafka_offset)` +
			` SELECT $1, u.source, u.event_id, u.topic, u.kafka_partition, u.kafka_offset` +
			` FROM unnest($2::text[], $3::text[], $4::text[], $5::int4[], $6::int8[])` +
			` WITH ORDINALITY AS u(source, event_id, topic, kafka_partition, kafka_offset, n)` +
			` ORDER BY u.n` +
			` ON CONFLICT (consumer, source, event_id) DO NOTHING` +
			` RETURNING source, event_id`,
	}, nil
}

// Config returns the configuration with its defaults applied.
func (ib *Inbox) Config() Config { return ib.cfg }

// HandlerFunc applies one event's effect in tx. It must do its work through
// tx only (not another connection), or the effect is not undone with the
// inbox row.
type HandlerFunc func(ctx context.Context, tx pgx.Tx) error

// RecordFunc applies the effect of rec, one record of a batch, in tx. Like
// HandlerFunc, it must do its work through tx only.
type RecordFunc func(ctx context.Context, tx pgx.Tx, rec *kgo.Record) error

// EventID returns rec's event id: the value of the configured header. A
// header that is missing or empty, repeated with different values, or not
// text PostgreSQL can store (a NUL byte, invalid UTF-8), is an error
// wrapping ErrMissingEventID that names the record's topic, partition
// and offset.
func (ib *Inbox) EventID(rec *kgo.Record) (string, error) {
	var id []byte
	found := false
	for _, h := range rec.Headers {
		if h.Key != ib.cfg.Header {
			continue
		}
		if found && !bytes.Equal(h.Value, id) {
			return "", fmt.Errorf("%w: record topic=%s partition=%d offset=%d has two %q headers, %q and %q; the producer must send one (with walbox: the outbox row's headers column must not carry an %q key that differs from its id column; see the package documentation for records already in the topic)",
				ErrMissingEventID, rec.Topic, rec.Partition, rec.Offset, ib.cfg.Header, id, h.Value, ib.cfg.Header)
		}
		id, found = h.Value, true
	}
	if len(id) == 0 {
		what := "no"
		if found {
			what = "an empty"
		}
		return "", fmt.Errorf("%w: record topic=%s partition=%d offset=%d has %s %q header; check that the producer sets it (walbox sends none for a row whose id column is missing or NULL), or set Config.Header to the header that carries the event id (walbox: event_id; walbox's Debezium-compatible records: id)",
			ErrMissingEventID, rec.Topic, rec.Partition, rec.Offset, what, ib.cfg.Header)
	}
	if bytes.IndexByte(id, 0) >= 0 || !utf8.Valid(id) {
		return "", fmt.Errorf("%w: record topic=%s partition=%d offset=%d has a %q header of %d bytes that is not text (%q): the inbox stores ids as PostgreSQL text, which holds neither NUL bytes nor invalid UTF-8; for binary ids (a UUID as 16 raw bytes, say), replace the header's value with a text form of it (hex) in rec.Headers before handing every copy of the record to the inbox",
			ErrMissingEventID, rec.Topic, rec.Partition, rec.Offset, ib.cfg.Header, len(id), id)
	}
	return string(id), nil
}

// key is what an inbox row is unique by, within one consumer.
type key struct{ source, id string }

// entry is one record of a batch with its key.
type entry struct {
	rec   *kgo.Record
	key   key
	first bool // the batch's first record with this key
}

// entries extracts every record's key before anything is written, so a
// record without a usable id refuses the whole batch untouched.
func (ib *Inbox) entries(recs []*kgo.Record) ([]entry, error) {
	es := make([]entry, len(recs))
	seen := make(map[key]bool, len(recs))
	for i, rec := range recs {
		id, err := ib.EventID(rec)
		if err != nil {
			return nil, fmt.Errorf("inbox %s: record %d of %d: %w", ib.table, i+1, len(recs), err)
		}
		var source string
		if ib.cfg.Source != nil {
			if source, err = ib.cfg.Source(rec); err != nil {
				return nil, fmt.Errorf("inbox %s: record %d of %d (topic=%s partition=%d offset=%d, event %q): Config.Source: %w",
					ib.table, i+1, len(recs), rec.Topic, rec.Partition, rec.Offset, id, err)
			}
		}
		if strings.IndexByte(source, 0) >= 0 || !utf8.ValidString(source) {
			return nil, fmt.Errorf("inbox %s: record %d of %d (topic=%s partition=%d offset=%d, event %q): Config.Source returned %q, which is not text PostgreSQL can store (a NUL byte or invalid UTF-8): return a text name",
				ib.table, i+1, len(recs), rec.Topic, rec.Partition, rec.Offset, id, source)
		}
		k := key{source, id}
		es[i] = entry{rec: rec, key: k, first: !seen[k]}
		seen[k] = true
	}
	return es, nil
}

// insert records the batch's keys (each once) in one statement and returns
// the ones that were not there yet.
func (ib *Inbox) insert(ctx context.Context, tx pgx.Tx, es []entry) (map[key]bool, error) {
	firsts := make([]entry, 0, len(es))
	for _, e := range es {
		if e.first {
			firsts = append(firsts, e)
		}
	}
	slices.SortFunc(firsts, func(a, b entry) int {
		return cmp.Or(cmp.Compare(a.key.source, b.key.source), cmp.Compare(a.key.id, b.key.id))
	})
	n := len(firsts)
	sources, ids, topics := make([]string, n), make([]string, n), make([]string, n)
	partitions, offsets := make([]int32, n), make([]int64, n)
	for i, e := range firsts {
		sources[i], ids[i], topics[i] = e.key.source, e.key.id, e.rec.Topic
		partitions[i], offsets[i] = e.rec.Partition, e.rec.Offset
	}
	rows, err := tx.Query(ctx, ib.insertSQL, ib.cfg.Consumer, sources, ids, topics, partitions, offsets)
	if err != nil {
		return nil, ib.insertError(err)
	}
	fresh := make(map[key]bool, n)
	var k key
	_, err = pgx.ForEachRow(rows, []any{&k.source, &k.id}, func() error {
		fresh[k] = true
		return nil
	})
	if err != nil {
		return nil, ib.insertError(err)
	}
	return fresh, nil
}

// insertError names the fix for the failures an old or missing table gives.
func (ib *Inbox) insertError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "42P01": // undefined_table
			return fmt.Errorf("inbox %s: record the event ids: the table does not exist: create it with Migrate or the files of inbox/migrations (001_inbox.sql, 002_inbox_source.sql): %w", ib.table, err)
		case "42703", "42P10": // undefined_column; no unique constraint matches ON CONFLICT
			return fmt.Errorf("inbox %s: record the event ids: the table predates the source column in its key: run Migrate or inbox/migrations/002_inbox_source.sql on it: %w", ib.table, err)
		}
	}
	return fmt.Errorf("inbox %s: record the event ids: %w", ib.table, err)
}

// HandleBatch applies each of recs at most once, inside the caller's
// transaction tx: it records the ids of all of them in the inbox with one
// INSERT … ON CONFLICT DO NOTHING, then calls fn, in recs' order, for each
// record whose id was not there yet (the first copy only, when the batch
// holds an event twice). applied[i] says whether recs[i]'s effect was
// applied now; false means it was applied before (by this consumer, for
// this source) and fn was not called for it.
//
// It takes no savepoint, so a whole poll costs no subtransaction: a
// savepoint per record, past 64 in one transaction, overflows the
// backend's subtransaction cache and drives every other backend's snapshot
// through pg_subtrans, which slows the whole database.
//
// Because nothing is rolled back record by record, an error leaves ids
// recorded in tx for records whose fn failed or never ran, and fn's partial
// changes. So a failure of fn (a returned error or a panic) aborts tx on
// purpose: every later statement in it fails, and its Commit commits
// nothing (pgx returns pgx.ErrTxCommitRollback). Roll tx back and have the
// whole batch delivered again (seek back to the first record's offsets, or
// restart the consumer without committing them): the inbox skips what a
// previous commit applied. The error is a *HandlerError naming the record.
// If the INSERT fails, PostgreSQL aborts tx itself. The Kafka offsets of
// recs may be committed only after tx's COMMIT returned nil.
//
// A record without a usable event id (or whose Config.Source fails) refuses
// the whole batch with ErrMissingEventID (or the Source's error) naming the
// record, before anything is written; tx is left as it was.
func (ib *Inbox) HandleBatch(ctx context.Context, tx pgx.Tx, recs []*kgo.Record, fn RecordFunc) (applied []bool, err error) {
	if len(recs) == 0 {
		return nil, nil
	}
	es, err := ib.entries(recs)
	if err != nil {
		return nil, err
	}
	fresh, err := ib.insert(ctx, tx, es)
	if err != nil {
		return nil, err
	}
	applied = make([]bool, len(es))
	for i, e := range es {
		if !e.first || !fresh[e.key] {
			continue
		}
		if err := ib.call(ctx, tx, fn, e); err != nil {
			return nil, ib.abort(ctx, tx, &HandlerError{Index: i, Record: e.rec, EventID: e.key.id, Source: e.key.source, table: ib.table, Err: err})
		}
		applied[i] = true
	}
	return applied, nil
}

// call runs fn for e, aborting tx if fn panics (the panic goes on).
func (ib *Inbox) call(ctx context.Context, tx pgx.Tx, fn RecordFunc, e entry) error {
	defer func() {
		if p := recover(); p != nil {
			_ = ib.abort(ctx, tx, nil)
			panic(p)
		}
	}()
	return fn(ctx, tx, e.rec)
}

// abortSQL fails on purpose, which puts the transaction in PostgreSQL's
// aborted state: nothing of it can be committed any more.
const abortSQL = `DO $walbox_inbox$ BEGIN RAISE EXCEPTION USING ERRCODE = 'P0001', MESSAGE = 'walbox inbox: a handler failed in this transaction, which must be rolled back (its event ids are recorded for records that were not applied)'; END $walbox_inbox$`

// abort makes tx uncommittable after err (a handler's failure) and returns
// err, joined with a note if tx could not be aborted.
func (ib *Inbox) abort(ctx context.Context, tx pgx.Tx, err error) error {
	_, abortErr := tx.Exec(context.WithoutCancel(ctx), abortSQL)
	if abortErr == nil { // cannot happen: the statement always raises
		return errors.Join(err, errors.New("inbox: could not abort the transaction after a handler's failure; roll it back, never commit it"))
	}
	return err
}

// Handle applies rec at most once inside the caller's transaction tx: it
// inserts the event id into the inbox and, if the row is new, calls fn; if
// the id is already there (the event was applied before by this consumer)
// it returns applied=false without calling fn. It is HandleBatch for one
// record: no savepoint, so Handle may be called for every record of a poll
// in one transaction (HandleBatch does the same in one statement).
//
// A failure of fn aborts tx (see HandleBatch): roll it back, as Commit
// commits nothing, and have the record delivered again. Until tx commits,
// nothing is recorded, so a crash before the commit lets the next delivery
// apply the event. Commit the record's Kafka offset only after tx's COMMIT
// returned nil.
//
// A record without a usable event id is refused with ErrMissingEventID
// before anything is written, and fn is not called.
func (ib *Inbox) Handle(ctx context.Context, tx pgx.Tx, rec *kgo.Record, fn HandlerFunc) (applied bool, err error) {
	res, err := ib.HandleBatch(ctx, tx, []*kgo.Record{rec}, func(ctx context.Context, tx pgx.Tx, _ *kgo.Record) error {
		return fn(ctx, tx)
	})
	if err != nil {
		return false, err
	}
	return res[0], nil
}

// Beginner starts a transaction: *pgx.Conn, *pgxpool.Pool and pgx.Tx (a
// nested transaction, that is a savepoint) satisfy it.
type Beginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// Process applies rec once in a transaction of its own: it begins one on db,
// calls Handle and commits, or rolls back when Handle fails or fn panics.
//
// When db is a *pgx.Conn or a pool and Process returns nil, the event has
// been applied and committed, now or before (applied says which), and the
// record's offset may be committed. When db is a pgx.Tx, Process's
// transaction is only a savepoint of it: its "commit" releases the
// savepoint, and the outer transaction can still roll back and take the
// inbox row and the effect with it; the offset may then be committed only
// after the outer transaction's COMMIT returned nil. That savepoint is a
// subtransaction: for many records in one transaction, call HandleBatch (or
// Handle) on it instead.
//
// On an error the transaction did not commit, except when the commit itself
// failed on a lost connection, in which case it may have: either way,
// deliver the record again, and the inbox decides.
func (ib *Inbox) Process(ctx context.Context, db Beginner, rec *kgo.Record, fn HandlerFunc) (applied bool, err error) {
	res, err := ib.ProcessBatch(ctx, db, []*kgo.Record{rec}, func(ctx context.Context, tx pgx.Tx, _ *kgo.Record) error {
		return fn(ctx, tx)
	})
	if err != nil {
		return false, err
	}
	return res[0], nil
}

// ProcessBatch applies recs, each at most once, in one transaction of its
// own: it begins one on db, calls HandleBatch and commits, or rolls back
// when HandleBatch fails or a handler panics (the panic goes on). It is
// the safe way to apply a whole poll: on any error nothing of the batch is committed (except when the commit itself
// failed on a lost connection, when all of it may have been), so deliver
// the batch again, from its first record; the inbox skips what was applied.
//
// When ProcessBatch returns nil and db is a *pgx.Conn or a pool, the batch
// is committed and the records' offsets may be committed. When db is a
// pgx.Tx, its transaction is a savepoint, as with Process: commit the
// offsets only after the outer transaction's COMMIT returned nil.
func (ib *Inbox) ProcessBatch(ctx context.Context, db Beginner, recs []*kgo.Record, fn RecordFunc) (applied []bool, err error) {
	if len(recs) == 0 {
		return nil, nil
	}
	first := recs[0]
	tx, err := db.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("inbox %s: begin transaction for %d records from topic=%s partition=%d offset=%d: %w", ib.table, len(recs), first.Topic, first.Partition, first.Offset, err)
	}
	// A panicking handler must not leave the transaction open: a caller
	// that recovers would find its connection stuck in an aborted
	// transaction (a pool's, never released).
	panicked := true
	defer func() {
		if panicked {
			_ = tx.Rollback(context.WithoutCancel(ctx))
		}
	}()
	applied, err = ib.HandleBatch(ctx, tx, recs, fn)
	panicked = false
	if err != nil {
		_ = tx.Rollback(context.WithoutCancel(ctx)) // HandleBatch's error says why; a dead connection rolls back by itself
		return nil, err
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("inbox %s: commit %d records from topic=%s partition=%d offset=%d (deliver them again; the inbox applies each at most once): %w", ib.table, len(recs), first.Topic, first.Partition, first.Offset, err)
	}
	return applied, nil
}
