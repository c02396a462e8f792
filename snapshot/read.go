package snapshot

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/tracing"
)

// Producer is the part of *kgo.Client a takeover uses: the relay's client,
// so snapshot records have its settings (acks=all, idempotent, murmur2).
type Producer interface {
	Produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	Flush(ctx context.Context) error
}

var _ Producer = (*kgo.Client)(nil)

// Router maps a row to a record; *router.Router is the implementation.
type Router interface {
	Route(ins *decoder.Insert) (router.Routed, error)
}

var _ Router = (*router.Router)(nil)

// Defaults.
const (
	DefaultBatchRows        = 1000
	DefaultProgressInterval = 10 * time.Second
)

// snapshotNameRE is what pg_export_snapshot names look like
// (00000003-0000001B-1); checked before the name reaches SQL.
var snapshotNameRE = regexp.MustCompile(`^[0-9A-Fa-f]+(-[0-9A-Fa-f]+)+$`)

// Stats says what a snapshot read and produced.
type Stats struct {
	Total    int64 // rows matching when the snapshot was taken
	Produced int64 // records produced (and, once Read returns nil, acknowledged)
	Elapsed  time.Duration
}

// reader reads one exported snapshot and produces its rows.
type reader struct {
	conn     *pgx.Conn
	table    slotctl.TableName
	cfg      Config
	router   Router
	producer Producer
	log      *slog.Logger
	progress time.Duration
	// consistentPoint stands in for the WAL position of every snapshot row
	// in error messages and dead-letter headers.
	consistentPoint pglogrepl.LSN
}

// read imports snapshotName into a REPEATABLE READ transaction on r.conn,
// reads the matching rows in order through a cursor, routes and produces
// each, and waits until Kafka acknowledged all of them. It holds no lock
// beyond the snapshot (and the table's ACCESS SHARE lock every SELECT
// takes).
func (r *reader) read(ctx context.Context, snapshotName string) (Stats, error) {
	start := time.Now()
	var st Stats
	if !snapshotNameRE.MatchString(snapshotName) {
		return st, fmt.Errorf("snapshot: the server exported a snapshot named %q, which is not a snapshot name", snapshotName)
	}
	tx, err := r.conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return st, fmt.Errorf("snapshot: begin the snapshot transaction: %w", err)
	}
	defer tx.Rollback(context.Background()) //nolint:errcheck // read-only; no-op after commit
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snapshotName+"'"); err != nil {
		return st, fmt.Errorf("snapshot: import snapshot %s: %w", snapshotName, err)
	}
	rel, err := TableRelation(ctx, tx, r.table)
	if err != nil {
		return st, err
	}
	query, err := selectSQL(rel, r.table, r.cfg)
	if err != nil {
		return st, err
	}
	countSQL := "SELECT count(*) FROM " + r.table.Sanitize()
	if r.cfg.Mode == ModePending {
		countSQL += whereSQL(r.cfg.Where)
	}
	// The operator's condition goes only through the extended protocol
	// (ExecParams), which runs exactly one statement: a condition that
	// closes the parenthesis and adds a statement is a server error.
	if err := scanInt(ctx, tx, countSQL, &st.Total); err != nil {
		return st, r.whereError(err)
	}
	r.log.Info("snapshot: reading outbox rows", "table", r.table.String(), "rows", st.Total,
		"mode", string(r.cfg.Mode), "where", r.cfg.Where, "order", r.cfg.orderBy(), "lsn", r.consistentPoint.String())
	if _, err := tx.Conn().PgConn().ExecParams(ctx, "DECLARE walbox_snapshot NO SCROLL CURSOR FOR "+query, nil, nil, nil, nil).Close(); err != nil {
		return st, r.whereError(err)
	}

	var (
		acked    atomic.Int64
		failOnce sync.Once
		failure  error
		failed   = make(chan struct{})
	)
	promise := func(rec *kgo.Record, err error) {
		r.cfg.Tracer.End(rec.Context, rec, err)
		if err != nil {
			failOnce.Do(func() {
				id, _ := rec.Context.Value(eventIDKey{}).(string)
				failure = fmt.Errorf("%w: event %q for topic %q: %w; the snapshot is not finished and is taken again on the next start",
					ErrProduce, id, rec.Topic, err)
				close(failed)
			})
			return
		}
		acked.Add(1)
	}
	batch := r.cfg.BatchRows
	if batch <= 0 {
		batch = DefaultBatchRows
	}
	fetch := "FETCH " + strconv.Itoa(batch) + " FROM walbox_snapshot"
	nextLog := time.Now().Add(r.progress)
	for {
		n, err := r.fetch(ctx, tx, fetch, rel, &st, promise)
		if err != nil {
			return st, err
		}
		select {
		case <-failed:
			return st, failure
		default:
		}
		if time.Now().After(nextLog) {
			r.logProgress(st, acked.Load(), start)
			nextLog = time.Now().Add(r.progress)
		}
		if n < batch {
			break
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return st, fmt.Errorf("snapshot: end the snapshot transaction: %w", err)
	}
	if err := r.producer.Flush(ctx); err != nil {
		return st, fmt.Errorf("snapshot: wait for Kafka's acks of %d snapshot records: %w", st.Produced, err)
	}
	select {
	case <-failed:
		return st, failure
	default:
	}
	if got := acked.Load(); got != st.Produced {
		return st, fmt.Errorf("%w: %d of %d snapshot records acknowledged after the flush", ErrProduce, got, st.Produced)
	}
	st.Elapsed = time.Since(start)
	r.logProgress(st, acked.Load(), start)
	return st, nil
}

type eventIDKey struct{}

// fetch reads one batch in text format, exactly as the server's output
// functions render each value (what pgoutput sends), and produces it.
func (r *reader) fetch(ctx context.Context, tx pgx.Tx, fetch string, rel *decoder.Relation, st *Stats,
	promise func(*kgo.Record, error),
) (int, error) {
	rr := tx.Conn().PgConn().ExecParams(ctx, fetch, nil, nil, nil, nil)
	readAt := r.cfg.Tracer.Now() // the batch's read, for its spans
	n := 0
	for rr.NextRow() {
		ins, err := rowInsert(rel, r.table, rr.Values())
		if err != nil {
			rr.Close()
			return n, err
		}
		ins.LSN, ins.CommitLSN = r.consistentPoint, r.consistentPoint
		routed, err := r.router.Route(ins)
		if err != nil {
			rr.Close()
			return n, fmt.Errorf("snapshot row (xmin %d): %w; fix or remove the row, then start again (the snapshot is taken again)", ins.XID, err)
		}
		if routed.DeadLetter {
			r.log.Warn("invalid outbox row of the snapshot routed to the dead-letter topic",
				"event_id", routed.EventID, "xid", ins.XID, "topic", routed.Record.Topic, "reason", routed.Reason)
		}
		traced := r.cfg.Tracer.Start(routed.Record, tracing.Event{ReadAt: readAt, CommitLSN: ins.CommitLSN, EventID: routed.EventID, DeadLetter: routed.DeadLetter, Replayed: true})
		routed.Record.Context = context.WithValue(traced, eventIDKey{}, routed.EventID)
		// Blocks while the client's buffer (--max-inflight-records) is full.
		r.producer.Produce(ctx, routed.Record, promise)
		st.Produced++
		n++
	}
	if _, err := rr.Close(); err != nil {
		return n, fmt.Errorf("snapshot: read rows of %s: %w", r.table, err)
	}
	return n, nil
}

func (r *reader) whereError(err error) error {
	if r.cfg.Mode == ModePending {
		return fmt.Errorf("snapshot: select the pending rows of %s with --snapshot-where %q: %w (fix the condition)", r.table, r.cfg.Where, err)
	}
	return fmt.Errorf("snapshot: select the rows of %s: %w", r.table, err)
}

func (r *reader) logProgress(st Stats, acked int64, start time.Time) {
	el := time.Since(start)
	rate := 0.0
	if el > 0 {
		rate = float64(st.Produced) / el.Seconds()
	}
	pct := 100.0
	if st.Total > 0 {
		pct = 100 * float64(st.Produced) / float64(st.Total)
	}
	r.log.Info("snapshot progress", "rows_done", st.Produced, "rows_total", st.Total, "rows_acked", acked,
		"percent", fmt.Sprintf("%.1f", pct), "rows_per_second", int64(rate), "elapsed", el.Round(time.Millisecond).String())
}
