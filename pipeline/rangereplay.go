package pipeline

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/tracing"
)

// Range replay (walbox replay): stream a saved range of the outbox again
// from the trailing slot that walbox run keeps with --replay-window
// (package retention), without touching it or the live slot.
//
// The trailing slot is copied into a TEMPORARY slot on the replication
// connection that streams it; a temporary slot belongs to its session, so
// whatever happens to the process (a crash, SIGKILL, a dropped connection)
// the server drops it when the session ends and nothing is left behind.

// ReplayHeader is the record header (value "true") that marks a replayed
// record, so consumers can tell a replay from the live stream.
const ReplayHeader = "walbox_replay"

// Sentinel errors of Replay and ParseReplayBound.
var (
	// ErrNoTrailingSlot: the trailing slot does not exist (walbox run was
	// never started with --replay-window).
	ErrNoTrailingSlot = errors.New("no trailing slot to replay from")
	// ErrRangeNotCovered: the range starts before what the trailing slot
	// still holds; see *RangeNotCoveredError.
	ErrRangeNotCovered = errors.New("range not covered by the trailing slot")
	// ErrBadBound: a --from or --to value is neither an LSN nor a time.
	ErrBadBound = errors.New("bad replay bound")
)

// RangeNotCoveredError says where the replayable range begins: the first
// transaction whose commit record starts at or after Earliest, which
// committed at EarliestTime (zero when no transaction was found before the
// end of the replay, so its time is unknown).
type RangeNotCoveredError struct {
	Slot         string
	From         string // the --from value as given
	Earliest     pglogrepl.LSN
	EarliestTime time.Time
	Reason       string
}

func (e *RangeNotCoveredError) Error() string {
	when := "it holds no transaction yet, so the earliest replayable time is unknown"
	if !e.EarliestTime.IsZero() {
		when = "by time, the first of them committed at " + e.EarliestTime.UTC().Format(time.RFC3339Nano) +
			" (a --from TIME at or after it is accepted, but a transaction whose commit record precedes the slot's position may have a later commit time and is not replayed)"
	}
	return fmt.Sprintf("%v: --from %s: %s; trailing slot %q holds exactly the transactions whose commit record starts at or after LSN %s: "+
		"give --from %s (or a later LSN) to replay from there; %s; keep a longer --replay-window for next time",
		ErrRangeNotCovered, e.From, e.Reason, e.Slot, e.Earliest, e.Earliest, when)
}

func (e *RangeNotCoveredError) Unwrap() error { return ErrRangeNotCovered }

// Range selects transactions by their commit: LSN bounds compare with the
// commit record's LSN (what pgoutput's Begin and Commit call the commit
// LSN), time bounds with the commit time; every bound is inclusive, and a
// zero bound is open. The zero Range contains everything.
type Range struct {
	FromLSN, ToLSN   pglogrepl.LSN
	FromTime, ToTime time.Time
}

// Contains reports whether a transaction that committed at commitLSN and
// commitTime is in r.
func (r Range) Contains(commitLSN pglogrepl.LSN, commitTime time.Time) bool {
	switch {
	case r.FromLSN != 0 && commitLSN < r.FromLSN,
		r.ToLSN != 0 && commitLSN > r.ToLSN,
		!r.FromTime.IsZero() && commitTime.Before(r.FromTime),
		!r.ToTime.IsZero() && commitTime.After(r.ToTime):
		return false
	}
	return true
}

// lsnForm is what ParseReplayBound accepts as an LSN: two hexadecimal
// numbers of at most 8 digits, as Postgres prints them.
var lsnForm = regexp.MustCompile(`^[0-9A-Fa-f]{1,8}/[0-9A-Fa-f]{1,8}$`)

// ParseReplayBound reads a --from or --to value: an LSN such as
// 16/B374D848, or an RFC 3339 time such as 2026-11-30T22:00:00Z (with a
// zone; fractional seconds allowed). Errors wrap ErrBadBound.
func ParseReplayBound(s string) (pglogrepl.LSN, time.Time, error) {
	s = strings.TrimSpace(s)
	if strings.Contains(s, "/") {
		if !lsnForm.MatchString(s) {
			return 0, time.Time{}, fmt.Errorf("%w: %q is not an LSN: expected the form 16/B374D848 (two hexadecimal numbers separated by /)", ErrBadBound, s)
		}
		lsn, err := pglogrepl.ParseLSN(s)
		if err != nil {
			return 0, time.Time{}, fmt.Errorf("%w: %q is not an LSN: expected the form 16/B374D848: %v", ErrBadBound, s, err)
		}
		return lsn, time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("%w: %q is neither an LSN (expected the form 16/B374D848) nor an RFC 3339 time (such as 2026-11-30T22:00:00Z)", ErrBadBound, s)
	}
	return 0, t, nil
}

// ReplayConfig is what Replay streams and how.
type ReplayConfig struct {
	// ConnString is walbox's DSN; replication=database is added.
	ConnString  string
	Publication string
	// Slot is the trailing slot to copy (never streamed from or moved).
	Slot string
	// Tracer, when set, traces the replayed events (walbox.replayed).
	Tracer *tracing.Tracer
	// Tables and MessagePrefix are as in Config. Invalid rows follow the
	// router's policy (dead-lettered or an error), as in walbox run.
	Tables        []string
	MessagePrefix string
	// Range selects the transactions replayed. Replay ends after its
	// upper bound, and at the latest at the server's WAL position when
	// Replay started.
	Range Range
	// From is the --from value as given, for refusals.
	From string
	// DisableStreaming, SpoolDir and SpoolMaxBytes are as in Config: a
	// streamed transaction waits in the spool until its commit, and one
	// the spool cannot hold is sent again with protocol version 1.
	DisableStreaming bool
	SpoolDir         string
	SpoolMaxBytes    int64
	// DryRun routes and counts the events without producing them.
	DryRun bool
	// ReceiveTimeout bounds the silence of the connection (30s; raised to
	// the server's wal_sender_timeout). A replay cannot reconnect after a
	// lost connection (its temporary slot goes with it), so it fails
	// instead; it moves to a new connection only for a fallback to
	// protocol version 1, from the live one (restart).
	ReceiveTimeout time.Duration
	// StatusInterval is how often the server is asked for its position
	// (1s); that is how an idle stream finds its end.
	StatusInterval time.Duration
	// Progress, when set, is called every ProgressInterval (5s) from
	// Replay's goroutine.
	Progress         func(ReplayProgress)
	ProgressInterval time.Duration
}

// ReplayProgress is a snapshot of a running replay.
type ReplayProgress struct {
	// Events routed so far (produced or, in a dry run, counted).
	Events int
	// WALDone and WALTotal are the bytes of WAL streamed and to stream,
	// from the start of the range to its end.
	WALDone, WALTotal uint64
	Elapsed           time.Duration
}

// ReplayResult is what a replay did.
type ReplayResult struct {
	// Topics counts the events per topic: acknowledged by Kafka, or in a
	// dry run routed.
	Topics map[string]int
	// Transactions in the range that held at least one event.
	Transactions int
	// Start is where the trailing slot's copy began; End the position
	// past which nothing was replayed.
	Start, End pglogrepl.LSN
	// TempSlot is the temporary slot's name.
	TempSlot string
	// Streamed counts the transactions the server streamed before their
	// commit (read back from the spool), in the range or not.
	Streamed int
}

// Events returns the total over every topic.
func (r ReplayResult) Events() int {
	n := 0
	for _, c := range r.Topics {
		n += c
	}
	return n
}

// Time bounds. A commit timestamp is taken before the commit record is
// written, and nothing bounds the time between the two (a backend may be
// descheduled in between), so WAL order is not commit-time order: no
// transaction's time says that no later one (in WAL order) committed
// earlier. So a replay bounded by --to TIME does not stop at a commit
// time: it reads up to the end of the range in WAL (--to LSN, else the
// server's position when the replay started) and keeps the transactions
// whose commit time is in the range. What a time range guarantees:
//
//   - every transaction the trailing slot holds (commit record at or after
//     its position) whose commit record starts before the server's
//     position at the start of the replay and whose commit time is within
//     [--from, --to] is replayed, and no other;
//   - a transaction whose commit record lies before the trailing slot's
//     position is not replayed even if its commit time is at or after
//     --from. --from TIME is refused when it is before the first
//     transaction the slot holds; at or after it, such a transaction is
//     still possible when it took its timestamp after that first
//     transaction did but wrote its commit record before it (usually
//     microseconds apart, not bounded). --from LSN has no such gap.

// Replay copies cfg.Slot into a temporary slot and produces every outbox
// event of the transactions in cfg.Range to its usual topic (what rt
// routes) with the ReplayHeader added, in commit order. It returns once
// Kafka acknowledged them all, or the first error; the temporary slot is
// dropped either way (by the server, with the session, if Replay could
// not). The live and trailing slots are only read.
func Replay(ctx context.Context, cfg ReplayConfig, producer Producer, rt Router, log *slog.Logger) (ReplayResult, error) {
	cfg.setDefaults()
	res := ReplayResult{Topics: map[string]int{}}
	if err := slotctl.ValidateSlotName(cfg.Slot); err != nil {
		return res, err
	}
	conn, err := connectReplication(ctx, cfg.ConnString)
	if err != nil {
		return res, err
	}
	var r *rangeReplay
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if r != nil {
			conn = r.conn // a restart moved to a new connection
		}
		_ = conn.Close(cctx) // a temporary slot still there goes with the session
	}()
	if err := checkTrailingSlot(ctx, conn, cfg.Slot); err != nil {
		return res, err
	}
	row, err := simpleQueryRow(ctx, conn, `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_lsn() END::text`)
	if err != nil {
		return res, fmt.Errorf("read the server's WAL position: %w", err)
	}
	current, err := pglogrepl.ParseLSN(row[0])
	if err != nil {
		return res, fmt.Errorf("server WAL position %q: %w", row[0], err)
	}

	res.TempSlot = tempSlotName()
	_, err = simpleQueryRow(ctx, conn, fmt.Sprintf(`SELECT pg_copy_logical_replication_slot(%s, %s, true)::text`,
		quoteLiteral(cfg.Slot), quoteLiteral(res.TempSlot)))
	if err != nil {
		return res, fmt.Errorf("copy trailing slot %q into temporary slot %q: %w (a replay needs one free replication slot: check max_replication_slots)",
			cfg.Slot, res.TempSlot, err)
	}
	row, err = simpleQueryRow(ctx, conn, fmt.Sprintf(`SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = %s`, quoteLiteral(res.TempSlot)))
	if err != nil {
		return res, fmt.Errorf("read temporary slot %q: %w", res.TempSlot, err)
	}
	if res.Start, err = pglogrepl.ParseLSN(row[0]); err != nil {
		return res, fmt.Errorf("temporary slot %q confirmed_flush_lsn %q: %w", res.TempSlot, row[0], err)
	}
	log.Info("replaying from a temporary copy of the trailing slot", "replay_slot", cfg.Slot, "temporary_slot", res.TempSlot,
		"lsn", res.Start.String(), "end_lsn", current.String())

	r = &rangeReplay{cfg: cfg, conn: conn, producer: producer, router: rt, log: log, res: &res,
		tables: Config{Tables: cfg.Tables}.tableSet(), dec: decoder.New(), current: current, started: time.Now()}
	r.receiveTimeout = cfg.ReceiveTimeout
	if wst, err := walSenderTimeout(ctx, conn); err == nil && wst > r.receiveTimeout {
		r.receiveTimeout = wst
	}
	r.end = current
	if cfg.Range.ToLSN != 0 && cfg.Range.ToLSN < current {
		r.end = cfg.Range.ToLSN
	}
	res.End = r.end
	r.rangeStart = max(res.Start, cfg.Range.FromLSN)

	// Streamed like walbox run, so a large transaction in the range does
	// not spill on the primary either.
	r.major = serverMajor(conn.ParameterStatus("server_version"))
	sp := newSpool(cfg.SpoolDir, cfg.SpoolMaxBytes, prometheus.NewGauge(prometheus.GaugeOpts{Name: "walbox_replay_spool_bytes"}))
	defer sp.close()
	r.streams = &streams{cfg: &Config{SpoolDir: cfg.SpoolDir}, log: log, dec: r.dec, spool: sp,
		metrics: newStreamMetrics(prometheus.NewRegistry()), fallback: r.restartFor,
		who: "the replay", retryBlock: "run the replay again", retryCommit: "run the replay again"}
	if err := r.startReplication(ctx, 0); err != nil {
		return res, err
	}
	streamErr := r.stream(ctx)
	// Whatever was produced is waited for, also after an error, so that
	// the counts are true.
	if !cfg.DryRun {
		if err := producer.Flush(ctx); err != nil && streamErr == nil {
			streamErr = fmt.Errorf("wait for Kafka's acknowledgements: %w", err)
		}
	}
	if err := r.produceErr(); err != nil && streamErr == nil {
		streamErr = err
	}
	r.mu.Lock()
	maps.Copy(res.Topics, r.acked)
	r.mu.Unlock()
	if streamErr != nil {
		return res, streamErr
	}
	r.dropTempSlot(ctx)
	return res, nil
}

func (c *ReplayConfig) setDefaults() {
	if c.ReceiveTimeout <= 0 {
		c.ReceiveTimeout = DefaultConfig().ReceiveTimeout
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
	if c.ProgressInterval <= 0 {
		c.ProgressInterval = 5 * time.Second
	}
	if c.SpoolDir == "" {
		c.SpoolDir = DefaultSpoolDir()
	}
	if c.SpoolMaxBytes <= 0 {
		c.SpoolMaxBytes = DefaultConfig().SpoolMaxBytes
	}
}

// checkTrailingSlot refuses a missing trailing slot (with how to enable
// it), one that is not pgoutput, and one that lost its WAL.
func checkTrailingSlot(ctx context.Context, conn *pgconn.PgConn, slot string) error {
	// invalidation_reason exists from PostgreSQL 17: read through to_jsonb,
	// it is empty before.
	rows, err := simpleQuery(ctx, conn, fmt.Sprintf(`SELECT COALESCE(plugin::text, ''), slot_type, COALESCE(wal_status, ''),
	COALESCE(database::text, '') = current_database()::text, COALESCE(to_jsonb(s) ->> 'invalidation_reason', '')
	FROM pg_replication_slots s WHERE slot_name = %s`, quoteLiteral(slot)))
	if err != nil {
		return fmt.Errorf("read trailing slot %q: %w", slot, err)
	}
	if len(rows) == 0 {
		return fmt.Errorf("%w: slot %q does not exist; start walbox run with --replay-window DURATION (WALBOX_REPLAY_WINDOW, e.g. 24h) "+
			"to keep a trailing slot, with --replay-slot if it is not named <slot>_replay; replays can then cover what commits from then on", ErrNoTrailingSlot, slot)
	}
	plugin, typ, walStatus, sameDB, reason := rows[0][0], rows[0][1], rows[0][2], rows[0][3] == "t", rows[0][4]
	switch {
	case !sameDB:
		return fmt.Errorf("%w: slot %q belongs to another database, not to the one --pg-dsn names; check --pg-dsn and --replay-slot", slotctl.ErrSlotMismatch, slot)
	case typ != "logical" || plugin != slotctl.Plugin:
		return fmt.Errorf("%w: slot %q is a %s slot with plugin %q, not walbox's trailing pgoutput slot; check --replay-slot",
			slotctl.ErrSlotMismatch, slot, typ, plugin)
	case walStatus == "lost" || reason != "":
		return fmt.Errorf("%w: trailing slot %q was invalidated (wal_status %q, reason %q), so nothing can be replayed from it; "+
			"drop it (slotctl drop --slot %s) and walbox run --replay-window creates a new one; %s",
			slotctl.ErrSlotLost, slot, walStatus, reason, slot, retention.LostAdvice(reason))
	}
	return nil
}

// tempSlotName returns a fresh temporary slot name.
func tempSlotName() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "walbox_replay_tmp_" + hex.EncodeToString(b)
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// simpleQuery runs sql with the simple protocol, the only one a
// replication connection speaks, and returns its rows as text.
func simpleQuery(ctx context.Context, conn *pgconn.PgConn, sql string) ([][]string, error) {
	results, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, err
	}
	var rows [][]string
	for _, r := range results {
		for _, row := range r.Rows {
			out := make([]string, len(row))
			for i, v := range row {
				out[i] = string(v)
			}
			rows = append(rows, out)
		}
	}
	return rows, nil
}

func simpleQueryRow(ctx context.Context, conn *pgconn.PgConn, sql string) ([]string, error) {
	rows, err := simpleQuery(ctx, conn, sql)
	if err != nil {
		return nil, err
	}
	if len(rows) != 1 {
		return nil, fmt.Errorf("%d rows, want 1", len(rows))
	}
	return rows[0], nil
}

// rangeReplay is the state of one replay; the loop belongs to Replay's
// goroutine, the counts (mu) are shared with the producer's promises.
type rangeReplay struct {
	cfg      ReplayConfig
	conn     *pgconn.PgConn
	producer Producer
	router   Router
	log      *slog.Logger
	res      *ReplayResult
	tables   map[string]struct{}
	dec      *decoder.Decoder
	messages messageRelations

	current, end, rangeStart pglogrepl.LSN
	receiveTimeout           time.Duration
	started                  time.Time

	// checked is set once the range's start was checked against the
	// first transaction the slot holds.
	checked bool
	// inRange is whether the open transaction is replayed; txnEvents
	// counts its events.
	inRange   bool
	txnEvents int
	txnReadAt time.Time // when the current transaction's Begin was read, for spans
	received  pglogrepl.LSN
	lastEnd   pglogrepl.LSN
	events    int
	done      bool
	// streams keeps streamed transactions until their commit and hands
	// them on whole, as in the relay (stream.go).
	streams *streams
	// major is the server's major version; unstream the transaction the
	// replay speaks protocol version 1 for (0 when it streams), and
	// unstreamOpen whether its Begin came (see restartFor).
	major        int
	unstream     uint32
	unstreamOpen bool

	mu     sync.Mutex
	acked  map[string]int
	failed error
}

func (r *rangeReplay) produceErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *rangeReplay) stream(ctx context.Context) error {
	nextStatus := time.Now()
	nextProgress := time.Now().Add(r.cfg.ProgressInterval)
	lastReceive := time.Now()
	for !r.done {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("replay interrupted after %d events: %w", r.events, err)
		}
		if err := r.produceErr(); err != nil {
			return err
		}
		now := time.Now()
		if silent := now.Sub(lastReceive); silent > r.receiveTimeout {
			return fmt.Errorf("nothing received from the server for %s (receive timeout %s); the replay cannot resume on a new connection, run it again",
				silent.Round(time.Millisecond), r.receiveTimeout)
		}
		if !now.Before(nextStatus) {
			// The reply the server sends carries its position: that is
			// how an idle stream sees that it passed the end.
			err := pglogrepl.SendStandbyStatusUpdate(ctx, r.conn, pglogrepl.StandbyStatusUpdate{
				WALWritePosition: r.lastEnd, WALFlushPosition: r.lastEnd, WALApplyPosition: r.lastEnd,
				ClientTime: now, ReplyRequested: true,
			})
			if err != nil {
				return fmt.Errorf("send standby status update: %w", err)
			}
			nextStatus = now.Add(r.cfg.StatusInterval)
		}
		if r.cfg.Progress != nil && !now.Before(nextProgress) {
			r.cfg.Progress(r.progress())
			nextProgress = now.Add(r.cfg.ProgressInterval)
		}
		if err := r.conn.Conn().SetReadDeadline(nextStatus); err != nil {
			return fmt.Errorf("set read deadline: %w", err)
		}
		raw, err := r.conn.ReceiveMessage(context.Background())
		if err != nil {
			if pgconn.Timeout(err) && !r.conn.IsClosed() {
				continue
			}
			return fmt.Errorf("replication stream of temporary slot %q: %w", r.res.TempSlot, err)
		}
		lastReceive = time.Now()
		switch msg := raw.(type) {
		case *pgproto3.CopyData:
			err := r.handleCopyData(msg.Data)
			var rs *replayRestart
			if errors.As(err, &rs) && !r.done {
				err = r.restart(ctx, rs)
				lastReceive = time.Now()
			}
			if err != nil && !errors.As(err, &rs) {
				return err
			}
		case *pgproto3.ErrorResponse:
			return fmt.Errorf("replication stream of temporary slot %q: %w", r.res.TempSlot, pgconn.ErrorResponseToPgError(msg))
		case *pgproto3.CopyDone:
			return fmt.Errorf("server ended the replication stream of temporary slot %q early (CopyDone)", r.res.TempSlot)
		}
	}
	return r.checkStart(nil)
}

func (r *rangeReplay) progress() ReplayProgress {
	p := ReplayProgress{Events: r.events, Elapsed: time.Since(r.started)}
	if r.end > r.rangeStart {
		p.WALTotal = uint64(r.end - r.rangeStart)
	}
	if r.received > r.rangeStart {
		p.WALDone = min(uint64(r.received-r.rangeStart), p.WALTotal)
	}
	return p
}

// pastEnd reports whether a transaction committing at commitLSN lies
// beyond the end of the replay: the end of the range in WAL (--to LSN), or
// the server's position when the replay started. A commit time is no end:
// a later transaction may have committed earlier (see Time bounds above).
func (r *rangeReplay) pastEnd(commitLSN pglogrepl.LSN) bool {
	return commitLSN > r.end || commitLSN >= r.current
}

func (r *rangeReplay) handleCopyData(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("empty CopyData message after %s", r.received)
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive after %s: %w", r.received, err)
		}
		// Outside a transaction, the server has sent every transaction
		// whose commit record starts before its position.
		// The check of the range's start may need the first transaction
		// the slot holds, which may come after the end of the range.
		if !r.dec.InTransaction() && (ka.ServerWALEnd >= r.current || ka.ServerWALEnd > r.end && !r.needsFirst()) {
			r.received = max(r.received, ka.ServerWALEnd)
			r.done = true
			r.log.Debug("the server passed the end of the replay", "lsn", ka.ServerWALEnd.String(), "end_lsn", r.end.String())
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData after %s: %w", r.received, err)
		}
		r.received = max(r.received, xld.WALStart+pglogrepl.LSN(len(xld.WALData)))
		return r.handleWAL(xld.WALStart, xld.WALData)
	}
	return nil
}

func (r *rangeReplay) handleWAL(walStart pglogrepl.LSN, walData []byte) error {
	msg, err := r.dec.Decode(walStart, walData)
	if err != nil {
		return fmt.Errorf("decode WAL message at %s: %w", walStart, err)
	}
	c, commit := msg.(*decoder.StreamCommit)
	if commit && r.streams.received(c.XID) {
		r.res.Streamed++
		defer r.streams.drop(c.XID)
	}
	ok, _, begin, err := r.streams.feed(msg)
	if !ok {
		return r.handleDecoded(msg)
	}
	if err != nil || begin == nil {
		return err
	}
	return r.replayStreamed(begin)
}

// startReplication starts the temporary slot's stream at start (0: the
// slot's position), with protocol version 1 while r.unstream is set and
// streaming otherwise (unless --streaming=false).
func (r *rangeReplay) startReplication(ctx context.Context, start pglogrepl.LSN) error {
	args, streams := Config{Publication: r.cfg.Publication, MessagePrefix: r.cfg.MessagePrefix, DisableStreaming: r.cfg.DisableStreaming}.
		sessionPluginArgs(r.major, r.unstream)
	r.dec.Reset()
	r.dec.SetStreaming(streams)
	r.streams.reset()
	r.unstreamOpen = false
	if err := pglogrepl.StartReplication(ctx, r.conn, r.res.TempSlot, start, pglogrepl.StartReplicationOptions{PluginArgs: args}); err != nil {
		return fmt.Errorf("start replication on temporary slot %q from %s: %w", r.res.TempSlot, start, err)
	}
	return nil
}

// replayRestart asks the replay's loop to start the stream again from the
// end of the last transaction handled: with protocol version 1 for xid
// (cause says why), or streaming again (xid 0) once that transaction came.
type replayRestart struct {
	xid   uint32
	cause error
}

func (e *replayRestart) Error() string {
	if e.xid == 0 {
		return "streaming again"
	}
	return fmt.Sprintf("protocol version 1 for transaction %d: %v", e.xid, e.cause)
}

// restartFor turns what makes walbox run fall back to protocol version 1
// (stream.go's unstreamable: a rolled back subtransaction's messages the
// stream cannot attribute, a transaction larger than --spool-max-bytes, a
// spool that fails) into a restart of the stream with protocol version 1
// for that transaction; other errors pass.
func (r *rangeReplay) restartFor(xid uint32, err error) error {
	if err == nil || !errors.Is(err, errStreamAmbiguous) && !errors.Is(err, ErrSpoolFull) && !errors.Is(err, ErrSpoolUnwritable) {
		return err
	}
	return &replayRestart{xid: xid, cause: err}
}

// restart starts the stream again from the end of the last transaction
// handled, where the server skips the transactions that committed before and
// sends the one the restart is for (rs.xid) whole at its commit. A logical
// START_REPLICATION cannot follow another on one connection (the server ends
// the second at once), so the stream moves to a new connection and a new
// temporary slot, copied from the current one once its stream ended: the
// copy starts where the current one was confirmed, at or before the end of
// the last transaction handled, and holds what follows. The replay speaks
// protocol version 1 until that transaction's Commit, or to its end should
// the transaction roll back: a replay ends, so that is bounded.
func (r *rangeReplay) restart(ctx context.Context, rs *replayRestart) error {
	if rs.xid != 0 {
		r.log.Warn("starting the replay's stream again with protocol version 1 for this transaction, so that the server sends it whole at its commit",
			"xid", rs.xid, "lsn", r.lastEnd.String(), "err", rs.cause)
	} else {
		r.log.Info("the transaction the replay spoke protocol version 1 for came whole; streaming again", "xid", r.unstream, "lsn", r.lastEnd.String())
	}
	fail := func(err error) error {
		return fmt.Errorf("start the replay's stream again (%v): %w; run the replay again", rs, err)
	}
	dctx, cancel := context.WithTimeout(ctx, r.receiveTimeout)
	defer cancel()
	if err := endCopy(dctx, r.conn); err != nil {
		return fail(fmt.Errorf("end the replication stream of temporary slot %q: %w", r.res.TempSlot, err))
	}
	conn, err := connectReplication(ctx, r.cfg.ConnString)
	if err != nil {
		return fail(err)
	}
	slot := tempSlotName()
	if _, err := simpleQueryRow(ctx, conn, fmt.Sprintf(`SELECT pg_copy_logical_replication_slot(%s, %s, true)::text`,
		quoteLiteral(r.res.TempSlot), quoteLiteral(slot))); err != nil {
		_ = conn.Close(context.Background())
		return fail(fmt.Errorf("copy temporary slot %q into %q (a replay that starts again needs one more free replication slot for a moment: check max_replication_slots): %w", r.res.TempSlot, slot, err))
	}
	cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
	_ = r.conn.Close(cctx) // drops the old temporary slot
	ccancel()
	r.conn, r.res.TempSlot = conn, slot
	r.unstream = rs.xid
	return r.startReplication(ctx, r.lastEnd)
}

// endCopy ends a replication stream (START_REPLICATION's COPY) and reads
// up to the server's ReadyForQuery, dropping what it still sent of the
// stream: the connection can then run another command.
func endCopy(ctx context.Context, conn *pgconn.PgConn) error {
	// No read deadline left over from the stream's loop: ctx bounds it.
	if err := conn.Conn().SetReadDeadline(time.Time{}); err != nil {
		return err
	}
	conn.Frontend().Send(&pgproto3.CopyDone{})
	if err := conn.Frontend().Flush(); err != nil {
		return err
	}
	for {
		msg, err := conn.ReceiveMessage(ctx)
		if err != nil {
			return err
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(m)
		case *pgproto3.ReadyForQuery:
			return nil
		}
	}
}

// replayStreamed hands on a committed streamed transaction, begin being
// its Begin, from the spool as Begin, its changes and Commit (streams.next).
// Producing blocks when the client's buffer is full, so reading it back at
// once keeps memory bounded.
func (r *rangeReplay) replayStreamed(begin decoder.Decoded) error {
	if err := r.handleDecoded(begin); err != nil || r.done {
		return err
	}
	for {
		_, msg, last, err := r.streams.next()
		if err != nil {
			// A read failing midway restarts the stream (restartFor):
			// what went out of it goes out again, a replay's events may
			// come twice, never be missing.
			return err
		}
		if err := r.handleDecoded(msg); err != nil || last {
			return err
		}
	}
}

// handleDecoded handles one message of a transaction, received as such or
// read back from the spool.
func (r *rangeReplay) handleDecoded(msg decoder.Decoded) error {
	switch m := msg.(type) {
	case *decoder.Begin:
		if err := r.checkStart(m); err != nil {
			return err
		}
		if r.pastEnd(m.CommitLSN) {
			r.done = true
			return nil
		}
		r.inRange = r.cfg.Range.Contains(m.CommitLSN, m.CommitTime)
		r.txnEvents = 0
		r.txnReadAt = r.cfg.Tracer.Now()
		if r.unstream != 0 && m.XID == r.unstream {
			r.unstreamOpen = true
		}
	case *decoder.Insert:
		if !r.inRange || !r.routes(m.Relation) {
			return nil
		}
		return r.replayInsert(m)
	case *decoder.Message:
		// A message emitted outside a transaction is not an event (see
		// handleNonTransactional); it is not replayed.
		if !r.inRange || !m.Transactional || r.cfg.MessagePrefix == "" || m.Prefix != r.cfg.MessagePrefix {
			return nil
		}
		ins, err := r.messages.messageInsert(m)
		if err != nil {
			return fmt.Errorf("%w (a replay does not dead-letter malformed outbox messages)", err)
		}
		return r.replayInsert(ins)
	case *decoder.Commit:
		if r.inRange && r.txnEvents > 0 {
			r.res.Transactions++
		}
		r.inRange = false
		r.lastEnd = m.EndLSN
		if r.unstreamOpen {
			return &replayRestart{}
		}
	}
	return nil
}

// needsFirst reports whether checkStart still waits for the first
// transaction the slot holds: for a --from TIME, or to name the earliest
// replayable time when a --from LSN is refused.
func (r *rangeReplay) needsFirst() bool {
	return !r.checked && (!r.cfg.Range.FromTime.IsZero() || r.cfg.Range.FromLSN < r.res.Start)
}

// checkStart checks, at the first transaction the slot sends (first; nil
// when the stream ended before any), that the range does not begin before
// what the trailing slot holds.
func (r *rangeReplay) checkStart(first *decoder.Begin) error {
	if r.checked {
		return nil
	}
	r.checked = true
	refuse := func(reason string) error {
		e := &RangeNotCoveredError{Slot: r.cfg.Slot, From: r.cfg.From, Earliest: r.res.Start, Reason: reason}
		if first != nil {
			e.EarliestTime = first.CommitTime
		}
		return e
	}
	rg := r.cfg.Range
	if rg.FromLSN != 0 && rg.FromLSN < r.res.Start {
		return refuse(fmt.Sprintf("LSN %s is before the trailing slot's position %s, whose WAL may be gone", rg.FromLSN, r.res.Start))
	}
	if !rg.FromTime.IsZero() {
		// Transactions that committed before the slot's position are not
		// streamed; one of them may have committed after --from unless
		// --from is at or after the first transaction the slot holds.
		if first == nil {
			return refuse("whether that time is covered cannot be told without a transaction the trailing slot holds")
		}
		if rg.FromTime.Before(first.CommitTime) {
			return refuse("that time is before the first transaction the trailing slot holds; earlier transactions may be gone")
		}
	}
	return nil
}

// routes reports whether rel is an outbox table.
func (r *rangeReplay) routes(rel *decoder.Relation) bool {
	if r.tables == nil {
		return true
	}
	_, ok := r.tables[rel.QualifiedName()]
	return ok
}

func (r *rangeReplay) replayInsert(ins *decoder.Insert) error {
	routed, err := r.router.Route(ins)
	if err != nil {
		return err
	}
	rec := routed.Record
	rec.Headers = append(rec.Headers, kgo.RecordHeader{Key: ReplayHeader, Value: []byte("true")})
	r.events++
	r.txnEvents++
	if r.cfg.DryRun {
		r.mu.Lock()
		if r.acked == nil {
			r.acked = map[string]int{}
		}
		r.acked[rec.Topic]++
		r.mu.Unlock()
		return nil
	}
	// Never cancelled: a record once handed over is waited for (Flush), so
	// the counts are what Kafka acknowledged.
	rec.Context = r.cfg.Tracer.Start(rec, tracing.Event{ReadAt: r.txnReadAt, CommitLSN: ins.CommitLSN, CommitTime: ins.CommitTime, EventID: routed.EventID, DeadLetter: routed.DeadLetter, Replayed: true})
	r.producer.Produce(context.Background(), rec, r.settle)
	return nil
}

// settle runs in the producer's callback goroutine.
func (r *rangeReplay) settle(rec *kgo.Record, err error) {
	r.cfg.Tracer.End(rec.Context, rec, err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		if r.failed == nil {
			r.failed = fmt.Errorf("kafka refused a replayed record for topic %q: %w; %s", rec.Topic, err, produceHint(err))
		}
		return
	}
	if r.acked == nil {
		r.acked = map[string]int{}
	}
	r.acked[rec.Topic]++
}

// dropTempSlot ends the stream and drops the temporary slot; if that
// fails, closing the connection drops it too.
func (r *rangeReplay) dropTempSlot(ctx context.Context) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := pglogrepl.SendStandbyCopyDone(dctx, r.conn); err != nil {
		r.log.Debug("could not end the replication stream; closing the connection drops the temporary slot", "err", err)
		return
	}
	if err := pglogrepl.DropReplicationSlot(dctx, r.conn, r.res.TempSlot, pglogrepl.DropReplicationSlotOptions{Wait: true}); err != nil {
		r.log.Debug("could not drop the temporary slot; closing the connection drops it", "temporary_slot", r.res.TempSlot, "err", err)
	}
}
