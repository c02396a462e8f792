package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
)

const tableReplayHelp = `
Usage: walbox replay --from-table [--where SQL] [--from-id ID] [--to-id ID] [--topic TEMPLATE] [--dry-run] [options of walbox run]

Produces again the outbox rows still in the table (--table) that match, with
no slot involved. The rows are read in ONE snapshot (a REPEATABLE READ, READ
ONLY transaction) through a cursor, 1000 rows per FETCH, so a large table is
read without locks beyond the snapshot's ACCESS SHARE lock; nothing is
written anywhere, and a killed replay leaves nothing behind.

  --from-table      replay from the outbox table instead of the trailing
                    slot; excludes --from and --to
  --where SQL       an SQL condition on the table's rows, such as
                    "created_at >= '2026-11-30 22:00Z'"; raw SQL given by
                    the operator, as in psql, run in a READ ONLY transaction
  --from-id ID      first row: the --column-id column >= ID (inclusive)
  --to-id ID        last row: the --column-id column <= ID (inclusive); both
                    are sent as query parameters, compared with the column's
                    type (a uuid, a bigint, ...)
At least one of --where, --from-id, --to-id is required (--where true takes
every row).

Order: rows are sent in ascending order of --snapshot-order (default: the
--column-id column), the order 'walbox run --snapshot' uses. It is commit
order per aggregate (what consumers need; across aggregates order does not
matter) when, of two writers of one aggregate, the one that commits first
gets the smaller key: a bigserial, a UUIDv7 or clock_timestamp() assigned at
INSERT while the writer holds the aggregate's lock. created_at DEFAULT now()
is the transaction's start, not its commit, and a random UUIDv4 id
(gen_random_uuid(), the default of migrations/001) follows no order: add
a column such as "seq bigserial" and name it. Make the last column unique:
ties come in no defined order. The transaction id (xmin) is not used: it is taken when
a transaction first writes, not when it commits, all rows of a transaction
share it, and it is a 32-bit counter that wraps (age() is meaningless on
frozen rows).
`

// tableOptions are the flags of walbox replay --from-table.
type tableOptions struct {
	FromTable    bool
	Where        string
	FromID, ToID string
}

// check refuses the combinations that make no sense, before connecting.
func (o tableOptions) check(from, to string) error {
	if !o.FromTable {
		for _, f := range [][2]string{{"--where", o.Where}, {"--from-id", o.FromID}, {"--to-id", o.ToID}} {
			if f[1] != "" {
				return fmt.Errorf("%s selects rows of the outbox table and needs --from-table", f[0])
			}
		}
		return nil
	}
	switch {
	case from != "":
		return errors.New("--from-table and --from exclude each other: --from is a commit LSN or time of the trailing slot; select rows of the table with --where, --from-id or --to-id")
	case to != "":
		return errors.New("--from-table and --to exclude each other: --to is a commit LSN or time of the trailing slot; select rows of the table with --where, --from-id or --to-id")
	case o.Where == "" && o.FromID == "" && o.ToID == "":
		return errors.New("--from-table needs --where, --from-id or --to-id to select the rows to replay (--where true takes every row)")
	}
	return nil
}

// rowSelect builds the selection: --where, then the id bounds as
// parameters $1 and $2, quoted column names, order of --snapshot-order.
func (o tableOptions) rowSelect(cfg config.Config) snapshot.RowSelect {
	schema, name := cfg.TableName()
	sel := snapshot.RowSelect{Table: slotctl.TableName{Schema: schema, Name: name}, Order: cfg.SnapshotConfig().Order}
	var conds []string
	if o.Where != "" {
		// The newline ends a trailing "-- comment" of the operator's SQL.
		conds = append(conds, "("+o.Where+"\n)")
	}
	idCol := pgx.Identifier{cfg.Columns.ID}.Sanitize()
	if o.FromID != "" {
		sel.Args = append(sel.Args, o.FromID)
		conds = append(conds, fmt.Sprintf("%s >= $%d", idCol, len(sel.Args)))
	}
	if o.ToID != "" {
		sel.Args = append(sel.Args, o.ToID)
		conds = append(conds, fmt.Sprintf("%s <= $%d", idCol, len(sel.Args)))
	}
	for i, c := range conds {
		if i > 0 {
			sel.Where += " AND "
		}
		sel.Where += c
	}
	return sel
}

// selectionError says which option a server error of the selection comes
// from, with the server's message.
func (o tableOptions) selectionError(table slotctl.TableName, err error) error {
	var opts []string
	if o.Where != "" {
		opts = append(opts, fmt.Sprintf("--where %q", o.Where))
	}
	if o.FromID != "" {
		opts = append(opts, fmt.Sprintf("--from-id %q", o.FromID))
	}
	if o.ToID != "" {
		opts = append(opts, fmt.Sprintf("--to-id %q", o.ToID))
	}
	return fmt.Errorf("select the rows of %s with %s: %w (fix the option: --where must be an SQL condition on the table's columns, --from-id and --to-id values of the --column-id column's type)",
		table, strings.Join(opts, " "), err)
}

// tableReplay counts what Kafka acknowledged per topic.
type tableReplay struct {
	mu     sync.Mutex
	acked  map[string]int
	failed error
}

func (r *tableReplay) settle(rec *kgo.Record, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.failed == nil {
			id, _ := rec.Context.Value(eventIDKey{}).(string)
			r.failed = fmt.Errorf("kafka refused the replayed event %q for topic %q: %w; %s; walbox replay keeps no position, so run it again after the fix (what was acknowledged is sent again; consumers deduplicate by event_id)",
				id, rec.Topic, err, pipeline.ProduceHint(err))
		}
		return
	}
	r.acked[rec.Topic]++
}

func (r *tableReplay) result() (pipeline.ReplayResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := pipeline.ReplayResult{Topics: map[string]int{}}
	for t, n := range r.acked {
		res.Topics[t] = n
	}
	return res, r.failed
}

type eventIDKey struct{}

// runTableReplay is walbox replay --from-table: it returns once Kafka
// acknowledged every record, or the first error.
func runTableReplay(ctx context.Context, cfg config.Config, o tableOptions, dryRun bool, rt pipeline.Router, stdout, stderr io.Writer) error {
	log := newLogger(cfg, stderr)
	producer, closeProducer, err := replayProducer(ctx, cfg, dryRun, log)
	if err != nil {
		return err
	}
	defer closeProducer()
	r := &tableReplay{acked: map[string]int{}}
	produced, total, err := readTable(ctx, cfg, o, dryRun, rt, producer, r, log, stderr)
	if err == nil && producer != nil {
		if ferr := producer.Flush(ctx); ferr != nil {
			err = fmt.Errorf("wait for Kafka's acks of %d replayed records: %w", produced, ferr)
		}
	}
	res, failed := r.result()
	if err == nil {
		err = failed
	}
	if err == nil && res.Events() != produced {
		err = fmt.Errorf("%d of %d replayed records acknowledged after the flush", res.Events(), produced)
	}
	if err != nil {
		if res.Events() > 0 && !dryRun {
			writeCounts(stdout, res, dryRun)
			return fmt.Errorf("%w (the counts above are the events Kafka acknowledged before the failure)", err)
		}
		return err
	}
	writeCounts(stdout, res, dryRun)
	verb := "sent"
	if dryRun {
		verb = "found (dry run, nothing sent)"
	}
	schema, name := cfg.TableName()
	fmt.Fprintf(stderr, "walbox replay: %d of %d matching rows %s, from table %s in order of %v\n",
		res.Events(), total, verb, slotctl.TableName{Schema: schema, Name: name}, cfg.SnapshotConfig().Order)
	return nil
}

// readTable reads the selected rows in one read-only snapshot and routes
// each: counted (dry run) or produced with the replay header.
func readTable(ctx context.Context, cfg config.Config, o tableOptions, dryRun bool, rt pipeline.Router,
	producer pipeline.Producer, r *tableReplay, log *slog.Logger, stderr io.Writer,
) (produced int, total int64, err error) {
	sel := o.rowSelect(cfg)
	conn, err := pgx.Connect(ctx, cfg.PGDSN)
	if err != nil {
		return 0, 0, fmt.Errorf("connect to Postgres (--pg-dsn): %w", err)
	}
	defer conn.Close(context.Background())
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, 0, fmt.Errorf("begin the read-only snapshot: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read-only; no-op after commit
	rel, err := snapshot.TableRelation(ctx, tx, sel.Table)
	if err != nil {
		return 0, 0, fmt.Errorf("%w (--table)", err)
	}
	if (o.FromID != "" || o.ToID != "") && rel.ColumnIndex(cfg.Columns.ID) < 0 {
		return 0, 0, fmt.Errorf("--from-id and --to-id compare the --column-id column %q, which %s does not have as a plain column; select the rows with --where instead",
			cfg.Columns.ID, sel.Table)
	}
	if total, err = snapshot.CountRows(ctx, tx, sel); err != nil {
		return 0, 0, o.selectionError(sel.Table, err)
	}
	log.Info("replaying rows of the outbox table", "table", sel.Table.String(), "rows", total,
		"where", sel.Where, "order", fmt.Sprint(sel.Order), "dry_run", dryRun)
	start := time.Now()
	next := start.Add(progressEvery)
	_, err = snapshot.ReadRows(ctx, tx, rel, sel, func(ins *decoder.Insert) error {
		routed, err := rt.Route(ins)
		if err != nil {
			return fmt.Errorf("row (xmin %d): %w; fix the row or leave it out with --where", ins.XID, err)
		}
		if routed.DeadLetter {
			log.Warn("invalid outbox row routed to the dead-letter topic", "event_id", routed.EventID, "xid", ins.XID,
				"topic", routed.Record.Topic, "reason", routed.Reason)
		}
		rec := routed.Record
		rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: pipeline.ReplayHeader, Value: []byte("true")})
		produced++
		if dryRun {
			r.mu.Lock()
			r.acked[rec.Topic]++
			r.mu.Unlock()
		} else {
			rec.Context = context.WithValue(context.Background(), eventIDKey{}, routed.EventID)
			// Never cancelled: a record once handed over is waited for
			// (Flush), so the counts are what Kafka acknowledged. Blocks
			// while --max-inflight-records are buffered.
			producer.Produce(context.Background(), rec, r.settle)
		}
		if now := time.Now(); now.After(next) {
			writeTableProgress(stderr, produced, total, now.Sub(start))
			next = now.Add(progressEvery)
		}
		r.mu.Lock()
		failed := r.failed
		r.mu.Unlock()
		return failed
	})
	if err != nil {
		var pgErr interface{ SQLState() string }
		if errors.As(err, &pgErr) {
			return produced, total, o.selectionError(sel.Table, err)
		}
		return produced, total, err
	}
	if err := tx.Commit(ctx); err != nil {
		return produced, total, fmt.Errorf("end the read-only snapshot: %w", err)
	}
	return produced, total, nil
}

// progressEvery is how often a long replay reports progress on stderr.
const progressEvery = 5 * time.Second

func writeTableProgress(out io.Writer, done int, total int64, elapsed time.Duration) {
	pct := 100.0
	if total > 0 {
		pct = 100 * float64(done) / float64(total)
	}
	rate := float64(done) / max(elapsed.Seconds(), 1e-3)
	fmt.Fprintf(out, "walbox replay: %d of %d rows (%.0f%%), %.0f rows/s, %s elapsed\n",
		done, total, pct, rate, elapsed.Round(time.Second))
}
