package pipeline

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/walbox/walbox/decoder"
)

// Streaming of in-progress transactions (pgoutput protocol version 2+,
// streaming 'on').
//
// With protocol version 1 the walsender keeps a transaction's changes until
// its commit and spills what exceeds logical_decoding_work_mem to the
// primary's disk, then decodes all of it again before sending anything that
// follows: a bulk job on any table stalls the outbox behind it. Streaming
// sends a large transaction's changes as they are decoded, between Stream
// Start and Stream Stop, and drops the changes of tables outside the
// publication on the way, so a foreign bulk job costs walbox nothing.
//
// Streaming stays invisible past this file: the changes of a streamed
// transaction go to the spool (spool.go), and only at its Stream Commit are
// they read back and handled as an ordinary transaction, Begin (with the
// commit LSN and time), the changes in their order, Commit (with the end
// LSN). Routing, the invalid-row and size policies, exactly-once batching,
// the dedup window and the checkpoint tracker see what protocol version 1
// would have sent. Nothing of it reaches Kafka before Postgres committed it,
// transactions still go out in commit order (the server sends Stream Commit
// and ordinary transactions in commit order, and the loop reads nothing else
// while it replays one), and the slot is confirmed as before: at a
// transaction's end once Kafka acknowledged all of it. A keepalive between
// stream blocks may still let the slot be confirmed up to the server's
// position when nothing is in flight: that position is before the open
// transaction's commit record, so the server sends the whole transaction
// again from a restart there (as it does for a large transaction it is
// still decoding with protocol version 1).

// streamMetrics count streamed transactions and the spool's size.
type streamMetrics struct {
	transactions prometheus.Counter
	aborts       *prometheus.CounterVec
	spoolBytes   prometheus.Gauge
	unstreamed   prometheus.Counter
	spoolErrors  prometheus.Counter
}

func newStreamMetrics(reg prometheus.Registerer) *streamMetrics {
	f := promauto.With(reg)
	return &streamMetrics{
		transactions: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_streamed_transactions_total",
			Help: "Transactions the server streamed before their commit (larger than its logical_decoding_work_mem) that committed and were handed on whole from the spool.",
		}),
		aborts: f.NewCounterVec(prometheus.CounterOpts{
			Name: "walbox_streamed_aborts_total",
			Help: "Stream Abort messages: scope transaction (a streamed transaction rolled back, its spooled changes deleted) or subtransaction (a ROLLBACK TO SAVEPOINT inside one, its changes skipped).",
		}, []string{"scope"}),
		unstreamed: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_streamed_unstreamed_total",
			Help: "Streamed transactions sent again with protocol version 1 after a reconnect: a rolled back subtransaction left logical decoding messages the stream does not attribute, the transaction did not fit in --spool-max-bytes, or the spool failed.",
		}),
		spoolErrors: f.NewCounter(prometheus.CounterOpts{
			Name: "walbox_spool_errors_total",
			Help: "Spool directory (--spool-dir) failures: it could not be created, locked, written or read back (a full disk, a read-only mount, permissions, too many open files). Each sends the transaction again with protocol version 1; walbox goes on.",
		}),
		spoolBytes: f.NewGauge(prometheus.GaugeOpts{
			Name: "walbox_spool_bytes",
			Help: "Bytes of streamed, not yet committed transactions kept in the spool directory (--spool-dir); at most --spool-max-bytes.",
		}),
	}
}

// Protocol versions walbox negotiates; see pluginArgs.
const (
	protoV1 = 1
	protoV2 = 2 // PostgreSQL 14: streaming
	protoV3 = 3 // 15: two-phase (not enabled by walbox, so same messages as 2)
	protoV4 = 4 // 16: parallel streaming (walbox streams 'on', so same messages as 2)
)

// protoVersionFor returns the highest pgoutput protocol version a server of
// major version major accepts.
func protoVersionFor(major int) int {
	switch {
	case major >= 16:
		return protoV4
	case major == 15:
		return protoV3
	case major == 14:
		return protoV2
	default:
		return protoV1
	}
}

// pluginArgs builds the pgoutput options of START_REPLICATION for a server
// of major version major (0 when unknown) and reports whether the session
// streams in-progress transactions. Kept as one function so that every
// option walbox passes is decided in one place.
//
// Streaming uses 'on', not 'parallel' (16+): 'parallel' only adds the abort
// LSN and time to Stream Abort, which walbox does not need, and 'on' sends
// the same messages on every version from 14 on.
func (c Config) pluginArgs(major int) (args []string, streaming bool) {
	proto := protoV1
	if !c.DisableStreaming {
		proto = protoVersionFor(major)
	}
	streaming = proto >= protoV2
	args = []string{
		"proto_version '" + strconv.Itoa(proto) + "'",
		"publication_names '" + quotePublication(c.Publication) + "'",
	}
	if c.MessagePrefix != "" || c.Heartbeats || c.Delivery == DeliveryExactlyOnce {
		// pgoutput sends logical decoding messages from PostgreSQL 14 on,
		// which the preflight check already requires. Exactly-once asks
		// for them whatever the options: a split position counts them
		// (SplitPosition, eos_split.go), so the stream must not change with
		// the options.
		args = append(args, "messages 'true'")
	}
	if streaming {
		args = append(args, "streaming 'on'")
	}
	return args, streaming
}

// sessionPluginArgs is pluginArgs for a session started for the sake of
// unstream (Relay.unstreamXID, 0 when none): protocol version 1 then.
func (c Config) sessionPluginArgs(major int, unstream uint32) (args []string, streaming bool) {
	if unstream != 0 {
		c.DisableStreaming = true
	}
	return c.pluginArgs(major)
}

// unstreamState follows the transaction X a session speaks protocol
// version 1 for. A streamed transaction that rolled back a subtransaction
// may hold logical decoding messages the stream does not attribute to a
// subtransaction (errStreamAmbiguous): the server tags every message with
// the top-level xid. Handing it on could publish a rolled back message, or
// drop a committed one, and change the split count of exactly-once
// (eos_split.go). A transaction may also not fit in the spool, or the spool
// may fail. In each case the session ends, and the next one speaks protocol
// version 1 from the confirmed position, where the server decodes X whole
// at its commit, as before streaming.
//
// Protocol version 1 is the session's, so it holds for every transaction
// until X ends, however X ends: once X's Commit is handled, or once the
// server says X is over (xactEnd: it rolled back, or it held nothing for
// walbox, so that PostgreSQL 15+ sends neither its Begin nor its Commit),
// and once the position a new session would start from is past X's end
// (X can then not come again), the session ends again to stream. Traffic
// around X does not hold this back: what is in flight is waited for, or
// sent again and deduplicated, as after any reconnect.
type unstreamState struct {
	xid   uint32
	open  bool          // its Begin was handled, not its Commit
	done  bool          // its Commit was handled
	end   pglogrepl.LSN // the end of its Commit, once done
	watch *xactEnd      // whether the server finished X; nil in unit tests
}

// streams is the streaming part of a relay: the spool of streamed
// transactions and the protocol-1 fallback (unstreamState). The loop feeds
// it the stream messages (feed) and takes each committed streamed
// transaction back whole, one message at a time (next); it tells it of
// every Begin and Commit it handles (begun, committed), and asks it when
// the fallback is over (fallbackEnd, endFallback). Only the loop
// goroutine uses it.
type streams struct {
	cfg     *Config
	log     *slog.Logger
	dec     *decoder.Decoder
	spool   *spool
	metrics *streamMetrics
	// fallback turns what protocol version 1 is spoken for (a stream the
	// spool cannot hold or tell apart) into the error that restarts the
	// stream, other errors passing: unstreamable for a relay's session,
	// the replay's restartFor for walbox replay. who names the reader and
	// retry tells how to start again, in the errors of a broken stream.
	fallback                func(xid uint32, err error) error
	who                     string
	retryBlock, retryCommit string
	// replay is the streamed transaction being handed on from the spool,
	// nil when none; seen holds the streamed transactions whose first
	// block this session received.
	replay *streamReplay
	seen   map[uint32]bool
	// unstream is the transaction this session was started with protocol
	// version 1 for (Relay.unstreamXID), 0 when none; unstreamXID is the
	// one the next session is to be started for, 0 when none.
	unstream    unstreamState
	unstreamXID uint32
}

// newStreams is the streaming part of a session of r that speaks protocol
// version 1 for unstream (0: none).
func newStreams(r *Relay, unstream uint32) *streams {
	s := &streams{cfg: &r.cfg, log: r.log, dec: r.dec, spool: r.spool, metrics: r.streamMetrics,
		unstream: unstreamState{xid: unstream}, who: "this session",
		retryBlock:  "reconnect so the server sends it again from its start",
		retryCommit: "restart so the server sends the transaction again"}
	s.fallback = s.unstreamable
	return s
}

// reset forgets every streamed transaction, for a stream that starts again.
func (s *streams) reset() {
	s.spool.reset()
	s.seen = map[uint32]bool{}
	s.replay = nil
}

// received reports whether the first block of streamed transaction xid
// came.
func (s *streams) received(xid uint32) bool { return s.seen[xid] }

// drop forgets streamed transaction xid and its spooled changes.
func (s *streams) drop(xid uint32) {
	if s.replay != nil && s.replay.commit.XID == xid {
		s.replay = nil
	}
	s.spool.drop(xid)
}

// watch sets what tells whether the server finished X (watchXactEnd).
func (s *streams) watch(w *xactEnd) { s.unstream.watch = w }

// begun is told of every Begin the loop handles.
func (s *streams) begun(xid uint32) {
	if s.unstream.xid != 0 && xid == s.unstream.xid {
		s.unstream.open = true
	}
}

// committed is told of every Commit the loop handles.
func (s *streams) committed(end pglogrepl.LSN) {
	if s.unstream.open {
		s.unstream.open, s.unstream.done, s.unstream.end = false, true, end
		s.log.Info("streamed transaction sent whole with protocol version 1", "xid", s.unstream.xid)
	}
}

// fallbackEnd is the position past which X cannot come again: the end of
// its Commit, or past its end record once the server says it ended; 0
// while that is not known (or no fallback is on), and while a streamed
// transaction is half handed on.
func (s *streams) fallbackEnd() pglogrepl.LSN {
	if s.replay != nil || s.unstream.xid == 0 || s.unstream.open {
		return 0
	}
	if s.unstream.done {
		return s.unstream.end
	}
	if s.unstream.watch == nil {
		return 0
	}
	return s.unstream.watch.end()
}

// endFallback is the error that ends the session to stream again, once the
// loop found the fallback over.
func (s *streams) endFallback() error {
	return &connectionLostError{err: fmt.Errorf("xid %d, which protocol version 1 was spoken for, ended and the slot's position is past it; reconnecting to stream again", s.unstream.xid)}
}

// unstreamable turns errStreamAmbiguous of streamed transaction xid,
// ErrSpoolFull and ErrSpoolUnwritable into a reconnect with protocol
// version 1 (unstreamState); other errors pass. A transaction larger than
// --spool-max-bytes, or one the spool cannot hold (a full disk, a read-only
// mount, permissions), is thus delivered as before streaming (the server
// keeps it, spilling to its own disk, and sends it at its commit) instead
// of stopping walbox, or of reconnecting for ever: the same transaction
// would fail the spool again after every restart. A spool fault costs
// speed, not availability.
func (s *streams) unstreamable(xid uint32, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, errStreamAmbiguous):
		s.log.Warn("reconnecting with protocol version 1 so that the server sends the transaction whole at its commit", "xid", xid, "err", err)
	case errors.Is(err, ErrSpoolFull):
		s.log.Warn("the streamed transaction does not fit in the spool: reconnecting with protocol version 1, so that the server keeps it (spilling to its own disk, as without streaming) and sends it whole at its commit; "+
			"raise --spool-max-bytes (with the disk space under --spool-dir) to stream transactions of this size", "xid", xid, "err", err)
	case errors.Is(err, ErrSpoolUnwritable):
		s.metrics.spoolErrors.Inc()
		s.log.Warn("the spool failed: reconnecting with protocol version 1 for this transaction, so that the server keeps it (spilling to its own disk, as without streaming) and sends it whole at its commit; "+
			"fix the directory (free space, a writable mount, permissions) or point --spool-dir elsewhere to stream large transactions again", "xid", xid, "spool_dir", s.cfg.SpoolDir, "err", err)
	default:
		return err
	}
	s.unstreamXID = xid
	s.metrics.unstreamed.Inc()
	return &connectionLostError{err: err}
}

// xactEnd tells whether a transaction ended, asked on an ordinary
// connection (pg_xact_status): under protocol version 1 a transaction that
// rolls back, or holds nothing the publication sends (PostgreSQL 15+ skips
// an empty transaction's Begin and Commit), leaves no trace in the stream.
// Safe for concurrent use: its goroutine publishes, the loop reads.
type xactEnd struct {
	lsn atomic.Uint64
}

// end returns a WAL position past the transaction's end record once it
// ended, 0 before; unstreamBlind when the server could not be asked for
// unstreamBlindAfter.
func (w *xactEnd) end() pglogrepl.LSN { return pglogrepl.LSN(w.lsn.Load()) }

// unstreamBlindAfter bounds a fallback whose transaction's status cannot be
// read (a role that may not log in to the database, say): past it the
// session ends to stream again all the same, so protocol version 1 is never
// for good. Should the transaction still be open and undecidable, the
// stream falls back again, once per bound at most. A variable for tests.
var unstreamBlindAfter = 5 * time.Minute

// unstreamBlind is the end xactEnd reports when it gave up asking: below
// every position a session starts from.
const unstreamBlind pglogrepl.LSN = 1

// watchXactEnd starts asking every interval whether transaction xid ended;
// stop ends the goroutine and waits for it.
func (r *Relay) watchXactEnd(ctx context.Context, xid uint32, interval time.Duration) (w *xactEnd, stop func()) {
	w = &xactEnd{}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		var conn *pgx.Conn
		defer func() {
			if conn != nil {
				conn.Close(context.Background())
			}
		}()
		var failingSince time.Time
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			lsn, err := xactEnded(ctx, &conn, r.cfg.ConnString, xid)
			if err == nil && lsn != 0 {
				w.lsn.Store(uint64(lsn))
				r.log.Info("the transaction protocol version 1 is spoken for ended on the server", "xid", xid, "lsn", lsn.String())
				return
			}
			if err == nil {
				failingSince = time.Time{}
			}
			if err != nil && ctx.Err() == nil {
				switch {
				case failingSince.IsZero():
					// Its Commit, if it comes, still ends the fallback.
					failingSince = time.Now()
					r.log.Warn("cannot ask the server whether the transaction protocol version 1 is spoken for ended; retrying (grant the walbox role a login to the database, as for --standby)",
						"xid", xid, "err", err, "stream_again_in", unstreamBlindAfter.String())
				case time.Since(failingSince) > unstreamBlindAfter:
					r.log.Warn("could not ask the server whether the transaction protocol version 1 is spoken for ended; streaming again all the same",
						"xid", xid, "err", err, "for", time.Since(failingSince).Round(time.Second).String())
					w.lsn.Store(uint64(unstreamBlind))
					return
				}
			}
			if err != nil && conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w, func() { cancel(); <-done }
}

// xactEnded returns, once transaction xid (a 32-bit xid within 2^31 of the
// next one, fullXID) is no longer in progress, the server's WAL insert
// position read after that: past X's commit or abort record. 0 while X runs.
func xactEnded(ctx context.Context, conn **pgx.Conn, connString string, xid uint32) (pglogrepl.LSN, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if *conn == nil {
		cfg, err := pgx.ParseConfig(connString)
		if err != nil {
			return 0, err
		}
		if _, ok := cfg.RuntimeParams["application_name"]; !ok {
			cfg.RuntimeParams["application_name"] = "walbox"
		}
		if *conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return 0, err
		}
	}
	// The full xid8 is the one nearest the snapshot's xmax whose low 32
	// bits are xid (fullXID). NULL means too old to be known: long over.
	var xmax int64
	if err := (*conn).QueryRow(ctx, `SELECT pg_snapshot_xmax(pg_current_snapshot())::text::bigint`).Scan(&xmax); err != nil {
		return 0, fmt.Errorf("read the server's snapshot to find the 64-bit id of transaction %d: %w", xid, err)
	}
	full := fullXID(uint64(xmax), xid)
	var status string
	err := (*conn).QueryRow(ctx, `SELECT COALESCE(pg_xact_status($1::text::xid8), 'forgotten')`, strconv.FormatUint(full, 10)).Scan(&status)
	if err != nil {
		// A standby advances its next xid past X only when it replays
		// the commit or abort of X or of a newer transaction (not at
		// X's first record): until then pg_xact_status says X is "in
		// the future" there, and X, which walbox decoded, is running.
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "22023" {
			var recovery bool
			if rerr := (*conn).QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovery); rerr == nil && recovery {
				return 0, nil
			}
		}
		return 0, fmt.Errorf("read the status of transaction %d (%d with its epoch): %w", xid, full, err)
	}
	if status == "in progress" {
		return 0, nil
	}
	var pos string
	if err := (*conn).QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_insert_lsn() END::text`).Scan(&pos); err != nil {
		return 0, fmt.Errorf("read the server's WAL position: %w", err)
	}
	return pglogrepl.ParseLSN(pos)
}

// fullXID returns the 64-bit transaction id whose low 32 bits are xid
// nearest to xmax, a snapshot's xmax. Every xid that may still run is within
// 2^31 of the next xid (wraparound protection), and a snapshot's xmax (the
// latest completed xid + 1) lies at or below it: a transaction still running
// can be at or above xmax (an older one open, none newer completed), so the
// one below xmax would be the previous epoch's.
func fullXID(xmax uint64, xid uint32) uint64 {
	const half = 1 << 31
	d := uint32(xid - uint32(xmax)) // xid - xmax, mod 2^32
	back := 1<<32 - uint64(d)       // xmax - xid, when xid is below
	if d < half || xmax < back {
		return xmax + uint64(d) // at or above xmax (or nothing below in epoch 0)
	}
	return xmax - back
}

// serverMajor reads the major version from the server_version parameter
// the server reports at connection start ("15.4 (Debian 15.4-1)", "17beta1",
// "18.0"); 0 when it cannot be read, which keeps protocol version 1.
func serverMajor(serverVersion string) int {
	end := strings.IndexFunc(serverVersion, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(serverVersion)
	}
	n, err := strconv.Atoi(serverVersion[:end])
	if err != nil {
		return 0
	}
	return n
}

// streamReplay is a streamed transaction being handed on after its Stream
// Commit, a bounded number of changes per loop turn, so that backpressure,
// status updates and exactly-once commits keep running while a large one
// is read back.
type streamReplay struct {
	commit *decoder.StreamCommit
	r      *spoolReader // nil when nothing of it was kept
}

// feed handles the stream messages; ok is false for any other message.
// At a Stream Commit it returns the transaction's Begin, at lsn, and the
// transaction is then handed on by next.
func (s *streams) feed(msg decoder.Decoded) (ok bool, lsn pglogrepl.LSN, begin decoder.Decoded, err error) {
	switch m := msg.(type) {
	case *decoder.StreamStart:
		if !m.First && !s.seen[m.XID] {
			// The server sends every block of a transaction from its
			// first within one session; a later block of one whose start
			// this session never saw means changes were lost.
			return true, 0, nil, fmt.Errorf("stream block of xid %d is not the transaction's first, but %s never saw its first one; %s", m.XID, s.who, s.retryBlock)
		}
		if s.seen == nil {
			s.seen = map[uint32]bool{}
		}
		s.seen[m.XID] = true
		return true, 0, nil, s.fallback(m.XID, s.spool.start(m.XID, m.First))
	case *decoder.StreamChange:
		return true, 0, nil, s.fallback(m.TopXID, s.spool.append(m))
	case *decoder.StreamStop:
	case *decoder.StreamAbort:
		if m.Whole() {
			s.spool.drop(m.XID)
			delete(s.seen, m.XID)
			s.metrics.aborts.WithLabelValues("transaction").Inc()
		} else {
			s.spool.abortSub(m.XID, m.SubXID)
			s.metrics.aborts.WithLabelValues("subtransaction").Inc()
		}
	case *decoder.StreamCommit:
		if !s.seen[m.XID] {
			return true, 0, nil, fmt.Errorf("stream commit of xid %d (commit LSN %s) whose changes %s never received; %s", m.XID, m.CommitLSN, s.who, s.retryCommit)
		}
		delete(s.seen, m.XID)
		r, err := s.spool.open(m.XID)
		if err != nil {
			return true, 0, nil, s.fallback(m.XID, err)
		}
		begin, err := s.dec.BeginStreamed(m)
		if err != nil {
			return true, 0, nil, err
		}
		s.metrics.transactions.Inc()
		s.replay = &streamReplay{commit: m, r: r}
		return true, m.CommitLSN, begin, nil
	default:
		return false, 0, nil, nil
	}
	return true, 0, nil, nil
}

// replaying is the Stream Commit of the streamed transaction being handed
// on, nil when none.
func (s *streams) replaying() *decoder.StreamCommit {
	if s.replay == nil {
		return nil
	}
	return s.replay.commit
}

// spooled reports whether the transaction being handed on has spooled
// changes to read back (not yet at their end).
func (s *streams) spooled() bool { return s.replay.r != nil }

// next returns the next message of the streamed transaction being handed
// on: a change read back from the spool, or at their end its Commit (last
// set; the transaction is then handed on).
func (s *streams) next() (lsn pglogrepl.LSN, msg decoder.Decoded, last bool, err error) {
	rp := s.replay
	if rp.r != nil {
		c, err := rp.r.next()
		switch {
		case errors.Is(err, io.EOF):
		case err != nil:
			// Read back midway: the next session sends the
			// transaction whole, and the dedup (or the Kafka
			// transaction's abort) covers what went out.
			return 0, nil, false, s.fallback(rp.commit.XID, err)
		default:
			msg, err := s.dec.Decode(c.LSN, c.Data)
			if err != nil {
				return 0, nil, false, fmt.Errorf("decode streamed change of xid %d at %s: %w", c.XID, c.LSN, err)
			}
			return c.LSN, msg, false, nil
		}
	}
	commit, err := s.dec.CommitStreamed(rp.commit)
	if err != nil {
		return 0, nil, false, err
	}
	s.replay = nil
	s.spool.drop(rp.commit.XID)
	return rp.commit.EndLSN, commit, true, nil
}
