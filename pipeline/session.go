package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/checkpoint"
	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/heartbeat"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/tracing"
)

// session runs one replication connection from connect to close. It returns
// nil after a clean stop (ctx cancelled), otherwise the error that ended it;
// streamed reports whether the session got as far as streaming, which resets
// the reconnect backoff.
func (r *Relay) session(ctx context.Context) (streamed bool, err error) {
	if r.standby.Load() {
		if held, err := slotHeldElsewhere(ctx, r.cfg.ConnString, r.cfg.Slot); err == nil && held {
			return false, fmt.Errorf("slot %q: %w", r.cfg.Slot, errSlotActive)
		}
	}
	conn, err := connectReplication(ctx, r.cfg.ConnString)
	if err != nil {
		return false, err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = conn.Close(cctx)
	}()

	receiveTimeout := r.receiveTimeout(ctx, conn)

	// A new walsender session re-sends Relation messages and every
	// transaction after the confirmed position, whole.
	r.dec.Reset()
	// Exactly-once: acks of an aborted transaction's records count in the
	// tracker, so it starts again from what Kafka committed.
	r.tracker = r.delivery.sessionTracker(r.tracker)
	start := r.tracker.Rewind()
	// The server's identity and history (failover.go).
	srv, err := r.failover.identify(ctx, conn, r.delivery.needsHistory())
	if err != nil {
		return false, err
	}
	start = r.adoptHistory(start, srv)
	unstream := r.unstreamXID
	r.unstreamXID = 0
	args, streams := r.cfg.sessionPluginArgs(serverMajor(conn.ParameterStatus("server_version")), unstream)
	if args, err = r.withOrigin(conn, args); err != nil {
		return false, err
	}
	r.dec.SetStreaming(streams)
	// Whatever an earlier session spooled comes again from its start.
	r.spool.reset()
	gap := r.checkSlotAhead(ctx, conn, start) // slotgap.go
	err = pglogrepl.StartReplication(ctx, conn, r.cfg.Slot, start, pglogrepl.StartReplicationOptions{PluginArgs: args})
	if err != nil {
		err = fmt.Errorf("start replication on slot %q from %s: %w", r.cfg.Slot, start, err)
		if srv.InRecovery && isPrerequisiteState(err) {
			// 55000 on a standby (logical decoding before 16, a slot
			// being synchronized from the primary on 17+): the server
			// may be promoted, or the DSN reach the primary next time.
			return false, &standbyServerError{host: conn.Conn().RemoteAddr().String(), walEnd: srv.WALEnd, timeline: srv.Timeline, err: err}
		}
		return false, err
	}
	r.leaveStandby()
	// Only now, holding the slot: exactly-once loads the producer id,
	// which fences any other producer with its transactional id.
	if r.producer, err = r.delivery.startSession(ctx, r.producer, srv, r.failover.followedFromHistory()); err != nil {
		return false, err
	}
	r.slotStreamed(conn, gap)
	r.log.Info("streaming", "slot", r.cfg.Slot, "publication", r.cfg.Publication, "lsn", start.String(),
		"plugin_args", strings.Join(args, ", "))
	r.streaming.Store(true)
	r.metrics.streaming.Set(1)

	l := newLoop(r, conn, context.WithoutCancel(ctx), receiveTimeout, unstream)
	if unstream != 0 {
		w, stop := r.watchXactEnd(ctx, unstream, r.cfg.StatusInterval)
		l.stream.watch(w)
		defer stop()
	}
	defer l.watchStall(ctx)() // stallwatch.go
	defer func() {
		r.lastCommit = max(r.lastCommit, l.lastCommit)
		r.unstreamXID = l.stream.unstreamXID
	}()
	err = l.run(ctx)
	l.delivery.endSession(ctx)
	return true, err
}

func connectReplication(ctx context.Context, connString string) (*pgconn.PgConn, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("parse postgres connection string: %w", err)
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["replication"] = "database"
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = "walbox"
	}
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("connect for replication to %s:%d: %w", cfg.Host, cfg.Port, err)
	}
	return conn, nil
}

// quotePublication renders a publication name for the publication_names
// option, which pgoutput splits as a list of identifiers inside a string
// literal: double-quote the identifier, then escape for the literal.
func quotePublication(name string) string {
	ident := `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
	return strings.ReplaceAll(ident, `'`, `''`)
}

// loop is the state of one streaming session; all of it belongs to the
// goroutine that runs it.
type loop struct {
	// What the loop uses of its relay: configuration, collaborators and
	// the state that outlives a session (newLoop).
	cfg      *Config
	log      *slog.Logger
	producer Producer
	router   Router
	metrics  *metrics
	// stream is the streaming part: spool and protocol-1 fallback
	// (stream.go).
	stream   *streams
	inflight *inflight
	dedup    *dedupWindow
	reroute  *rerouteQueue
	messages *messageRelations
	tables   map[string]struct{}
	foreign  *foreignLog
	limits   *topicLimitCache
	tracker  *checkpoint.Tracker
	dec      *decoder.Decoder
	fails    *failState
	// confirmed is Relay.confirmed: the position last sent to the server.
	confirmed *atomic.Uint64
	// delivery is the delivery mode, called at the points of the loop
	// named in delivery.go.
	delivery delivery

	conn       *pgconn.PgConn
	produceCtx context.Context
	txn        *checkpoint.Txn
	txnReadAt  time.Time // when txn's Begin was read, for its spans (zero when not tracing)
	// ord is the position of the next change or message in txn.
	ord        uint32
	received   pglogrepl.LSN
	nextStatus time.Time
	sentLSN    pglogrepl.LSN
	// lastReceive is when the server last sent anything.
	lastReceive time.Time
	// receiveTimeout is Config.ReceiveTimeout, raised to the server's
	// wal_sender_timeout (see timeout.go).
	receiveTimeout time.Duration
	// lastCommit is the highest commit LSN (or non-transactional message
	// LSN) this session received.
	lastCommit pglogrepl.LSN
	// replayUntil is the highest commit LSN received by earlier sessions:
	// the transactions the server sends up to it may have been produced
	// already, the ones after it cannot have been.
	replayUntil pglogrepl.LSN
	// lastRel and routeCache cache routes (tables.go).
	lastRel    *decoder.Relation
	lastRoutes bool
	routeCache map[*decoder.Relation]bool
	// promise settles any record; built once per session.
	promise func(*kgo.Record, error)
	// readDeadline is the deadline last set on the socket.
	readDeadline time.Time
	// stall is the stall watch's view of the walsender (stallwatch.go).
	stall *stallWatch
}

// newLoop is the loop of a session of r on conn (nil in unit tests).
func newLoop(r *Relay, conn *pgconn.PgConn, produceCtx context.Context, receiveTimeout time.Duration, unstream uint32) *loop {
	l := &loop{
		cfg: &r.cfg, log: r.log, producer: r.producer, router: r.router,
		metrics: r.metrics, stream: newStreams(r, unstream), inflight: r.inflight,
		dedup: r.dedup, reroute: &r.reroute, messages: &r.messages, tables: r.tables,
		foreign: &r.foreign, limits: &r.limits,
		tracker: r.tracker, dec: r.dec, fails: &r.fails, confirmed: &r.confirmed, delivery: r.delivery,
		conn: conn, produceCtx: produceCtx, lastReceive: time.Now(),
		receiveTimeout: receiveTimeout, replayUntil: r.lastCommit,
	}
	l.promise = func(rec *kgo.Record, err error) { l.settle(rec, rec.Context.(*inflightRecord), err) }
	r.delivery.bind(l, produceCtx)
	return l
}

// fail records the first permanent failure (failState.fail). Safe for
// concurrent use.
func (l *loop) fail(err error) { l.fails.fail(err) }

func (l *loop) failureErr() error { return l.fails.failureErr() }

func (l *loop) run(ctx context.Context) error {
	for {
		if err := l.failureErr(); err != nil {
			l.confirmBeforeFailing(err)
			return err
		}
		if ctx.Err() != nil {
			return l.stop()
		}
		if silent := time.Since(l.lastReceive); silent > l.receiveTimeout {
			return &connectionLostError{err: fmt.Errorf("nothing received from the server for %s (receive timeout %s); reconnecting",
				silent.Round(time.Millisecond), l.receiveTimeout)}
		}
		if err := l.checkStall(); err != nil { // stallwatch.go
			return err
		}
		if !time.Now().Before(l.nextStatus) {
			if err := l.sendStatus(ctx); err != nil {
				return err
			}
		}
		if err := l.delivery.tick(ctx); err != nil {
			return err
		}
		l.produceRerouted()
		if l.inflight.full() {
			l.waitForAcks(ctx)
			// Not reading is not the server's silence: whatever it sent
			// meanwhile waits in the socket.
			l.lastReceive = time.Now()
			continue
		}
		if hold, err := l.unstreamDrain(ctx); err != nil {
			return err
		} else if hold {
			// A Kafka commit waited for is not the server's
			// silence either (nor a stall: stallwatch.go).
			l.lastReceive = time.Now()
			continue
		}
		if l.unstreamDone() {
			return l.stream.endFallback()
		}
		if l.stream.replaying() != nil {
			// A committed streamed transaction is handed on before
			// anything later is read: commit order.
			if err := l.replayStep(); err != nil {
				if !IsRetryable(err) && !l.conn.IsClosed() {
					l.confirmBeforeFailing(err)
				}
				return err
			}
			l.lastReceive = time.Now()
			continue
		}
		if err := l.receive(l.wakeAt()); err != nil {
			if pgconn.Timeout(err) || (ctx.Err() != nil && !l.conn.IsClosed()) {
				continue
			}
			if !IsRetryable(err) && !l.conn.IsClosed() {
				l.confirmBeforeFailing(err)
			}
			return err
		}
	}
}

// wakeAt is when the loop must stop waiting for WAL: the next status
// update, or a delivery mode's tick that is due earlier (an exactly-once
// commit; a commit that ends interrupts the wait itself).
func (l *loop) wakeAt() time.Time {
	if due := l.delivery.due(); !due.IsZero() && due.Before(l.nextStatus) {
		return due
	}
	return l.nextStatus
}

// The loop is the delivery mode's sessionLink (delivery.go).

func (l *loop) confirmNow(ctx context.Context) error {
	if l.conn == nil {
		return errNoConnection
	}
	return l.sendStatus(ctx)
}

func (l *loop) tracked() pglogrepl.LSN { return l.tracker.Confirmed() }

func (l *loop) send(rec *kgo.Record) { l.producer.Produce(l.produceCtx, rec, l.promise) }

// interrupt runs in another goroutine: l.conn is set before it starts.
func (l *loop) interrupt() {
	if l.conn != nil {
		_ = l.conn.Conn().SetReadDeadline(time.Now())
	}
}

func (l *loop) interrupted() { l.readDeadline = time.Time{} }

// waitForAcks parks the loop until an ack frees room, the next status update
// is due, the relay fails, or ctx ends.
func (l *loop) waitForAcks(ctx context.Context) {
	d := time.Until(l.nextStatus)
	if d <= 0 {
		d = 10 * time.Millisecond // status is sent by the caller; just poll
	}
	t := time.NewTimer(d)
	defer t.Stop()
	failed := l.fails.failed
	if l.failureErr() != nil {
		failed = nil // already known; wait for the acks still to come
	}
	select {
	case <-l.inflight.wake:
	case <-t.C:
	case <-failed:
	case <-ctx.Done():
	}
}

// receive reads and handles one message, waiting at most until deadline.
//
// The deadline is set on the socket rather than through a context: a
// context with a deadline makes pgconn start a watcher goroutine on every
// call, which cost more than decoding at high rates, while the deadline
// changes only once per status interval. A timeout leaves the connection
// usable (pgconn closes it on any other read error). Cancellation is seen by
// the loop between receives, at the latest one status interval later.
func (l *loop) receive(deadline time.Time) error {
	if !deadline.Equal(l.readDeadline) {
		if err := l.conn.Conn().SetReadDeadline(deadline); err != nil {
			return &connectionLostError{err: fmt.Errorf("set read deadline: %w", err)}
		}
		l.readDeadline = deadline
	}
	raw, err := l.conn.ReceiveMessage(context.Background())
	if err != nil {
		if l.conn.IsClosed() {
			return &connectionLostError{err: err}
		}
		return err
	}
	l.lastReceive = time.Now()
	switch msg := raw.(type) {
	case *pgproto3.CopyData:
		return l.handleCopyData(msg.Data)
	case *pgproto3.ErrorResponse:
		return pgconn.ErrorResponseToPgError(msg)
	case *pgproto3.CopyDone:
		return &connectionLostError{err: errors.New("server ended the replication stream (CopyDone)")}
	default:
		return nil
	}
}

func (l *loop) handleCopyData(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("empty CopyData message after %s", l.received)
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		ka, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("parse keepalive after %s: %w", l.received, err)
		}
		if !l.dec.InTransaction() {
			l.tracker.ObserveServerPosition(ka.ServerWALEnd)
		}
		if ka.ReplyRequested {
			l.nextStatus = time.Time{}
		}
		return nil
	case pglogrepl.XLogDataByteID:
		xld, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("parse XLogData after %s: %w", l.received, err)
		}
		if end := xld.WALStart + pglogrepl.LSN(len(xld.WALData)); end > l.received {
			l.received = end
		}
		return l.handleWAL(xld.WALStart, xld.WALData)
	default:
		return nil
	}
}

func (l *loop) handleWAL(walStart pglogrepl.LSN, walData []byte) error {
	msg, err := l.dec.Decode(walStart, walData)
	if err != nil {
		// Nothing of this message or after it is confirmed: after the
		// cause is fixed, a restart decodes it again.
		return fmt.Errorf("decode WAL message at %s: %w", walStart, err)
	}
	if ok, err := l.handleStream(msg); ok {
		return err
	}
	return l.handleDecoded(walStart, msg)
}

// The loop and the streaming part (stream.go).

// handleStream feeds msg to the streaming part if it is a stream message
// (ok); a Stream Commit's transaction is then handled as any other.
func (l *loop) handleStream(msg decoder.Decoded) (ok bool, err error) {
	ok, lsn, begin, err := l.stream.feed(msg)
	if !ok || err != nil || begin == nil {
		return ok, err
	}
	if err := l.handleDecoded(lsn, begin); err != nil {
		return true, err
	}
	return true, l.replayStep()
}

// replayBatch is how many spooled changes one loop turn hands on at most.
const replayBatch = 256

// replayStep hands on the next changes of the streamed transaction being
// replayed, until the in-flight limit is reached, the relay fails or
// replayBatch changes were handled; at the end of the spooled changes it
// ends the transaction.
func (l *loop) replayStep() error {
	for i := 0; i <= replayBatch; i++ {
		if l.stream.spooled() && (i == replayBatch || l.inflight.full() || l.failureErr() != nil) {
			return nil
		}
		lsn, msg, last, err := l.stream.next()
		if err != nil {
			return err
		}
		if err := l.handleDecoded(lsn, msg); err != nil {
			return err
		}
		if last {
			return nil
		}
	}
	return nil
}

// unstreamDone reports whether the session can end to stream again: the
// transaction it was for ended, the position the next session starts from
// is past its end, and no transaction is half handed on.
func (l *loop) unstreamDone() bool {
	target := l.stream.fallbackEnd()
	if target == 0 {
		return false
	}
	if l.dec.InTransaction() || !l.delivery.idle() {
		return false
	}
	return l.resumePosition() >= target
}

// unstreamDrain closes the Kafka transaction of exactly-once mode once the
// session has received past X's end, and holds reading until it committed:
// under steady traffic a Kafka transaction is open nearly all the time, and
// unstreamDone, which waits for none to be, never held (325,199
// transactions in 60 s kept the session on protocol version 1 for good).
// It reports whether the loop must not read WAL now.
func (l *loop) unstreamDrain(ctx context.Context) (bool, error) {
	if l.dec.InTransaction() {
		return false, nil
	}
	target := l.stream.fallbackEnd()
	if target == 0 || l.received < target {
		return false, nil
	}
	return l.delivery.flushUnits(ctx, l.tracker.Confirmed())
}

// resumePosition is where a new session would start: what Kafka
// acknowledged (at least once) or committed (exactly once).
func (l *loop) resumePosition() pglogrepl.LSN {
	return l.delivery.resumeFrom(l.tracker.Confirmed())
}

// handleDecoded handles one decoded message of a transaction, received as
// such or read back from the spool after its Stream Commit (stream.go).
func (l *loop) handleDecoded(walStart pglogrepl.LSN, msg decoder.Decoded) error {
	switch m := msg.(type) {
	case *decoder.Begin: // a unit begins
		l.stream.begun(m.XID)
		l.txn = l.tracker.Begin()
		l.txnReadAt = l.cfg.Tracer.Now()
		l.ord = 0
		l.lastCommit = max(l.lastCommit, m.CommitLSN)
	case *decoder.Insert:
		// Every insert of the transaction counts towards the positions,
		// routed or not: they are what the server sends again, in the
		// same order, on a new connection. Relation and Type messages do
		// not count: a session sends them when it first needs them.
		key := replayKey{commit: m.CommitLSN, ord: l.ord}
		l.ord++
		if !l.routes(m.Relation) {
			l.foreignChange(m)
			return nil
		}
		return l.handleInsert(m, key)
	case *decoder.Message:
		if m.Prefix == heartbeat.Prefix {
			// walbox's own heartbeat: observed, never routed nor counted
			// as an outbox message.
			if l.cfg.OnHeartbeat != nil {
				l.cfg.OnHeartbeat(m.Content)
			}
			return nil
		}
		if !m.Transactional {
			return l.handleNonTransactional(m)
		}
		key := replayKey{commit: m.CommitLSN, ord: l.ord}
		l.ord++
		return l.handleMessage(m, key)
	case *decoder.Ignored:
		if m.Kind == 'U' && m.Relation != nil && l.routes(m.Relation) {
			return l.outboxUpdate(m.Relation, walStart)
		}
	case *decoder.Commit: // the unit is done
		l.stream.committed(m.EndLSN)
		if l.txn != nil {
			l.tracker.Commit(l.txn, m.EndLSN)
			l.txn = nil
		}
		l.metrics.transactions.Inc()
		l.metrics.receivedLSN.Set(float64(m.EndLSN))
		l.delivery.unitDone(replayKey{commit: m.CommitLSN}, m.EndLSN)
	}
	return nil
}

// replayed reports whether the change of key was produced and acknowledged
// before a reconnect. Only transactions received before the reconnect can
// come again, so a transaction past them ends the replay and later changes
// cost one comparison.
func (l *loop) replayed(key replayKey) bool {
	if l.delivery.skips(key) {
		return true
	}
	if key.commit <= l.replayUntil {
		if l.dedup.seen(key) {
			l.metrics.duplicatesSkipped.Inc()
			return true
		}
	} else if l.replayUntil != 0 {
		l.dedup.endReplay()
		l.replayUntil = 0
	}
	return false
}

func (l *loop) handleInsert(ins *decoder.Insert, key replayKey) error {
	if l.replayed(key) {
		return nil
	}
	routed, err := l.router.Route(ins)
	if err != nil {
		return err
	}
	if routed.DeadLetter {
		l.log.Warn("invalid outbox row routed to the dead-letter topic",
			"event_id", routed.EventID, "lsn", ins.LSN.String(), "xid", ins.XID,
			"topic", routed.Record.Topic, "reason", routed.Reason)
	}
	m := &inflightRecord{
		txn: l.txn, key: key, eventID: routed.EventID, lsn: ins.LSN, xid: ins.XID,
		rel: ins.Relation, commitTime: ins.CommitTime, deadLetter: routed.DeadLetter,
	}
	rec, err := l.checkSize(routed.Record, m)
	if err != nil {
		return err
	}
	rec = l.delivery.divert(rec, m)
	l.txn.Add(1)
	l.remember(key)
	l.produce(rec, m)
	return nil
}

// remember records the key of a record about to be produced, for the
// reconnect dedup window. What a failover may erase is counted once Kafka
// acknowledged it (settle, failover.go).
func (l *loop) remember(key replayKey) {
	l.dedup.remember(key)
}

// handleMessage routes a transactional outbox message (see message.go);
// messages with other prefixes belong to other consumers of the WAL and are
// not walbox's.
func (l *loop) handleMessage(m *decoder.Message, key replayKey) error {
	if l.cfg.MessagePrefix == "" || m.Prefix != l.cfg.MessagePrefix {
		return nil
	}
	if l.txn == nil {
		// The decoder refuses a transactional message outside a
		// transaction; this is a second line of defence.
		return fmt.Errorf("transactional outbox message at %s (prefix %q) outside a transaction", m.LSN, m.Prefix)
	}
	ins, err := l.messages.messageInsert(m)
	if err == nil {
		return l.handleInsert(ins, key)
	}
	if l.cfg.DeadLetterTopic == "" {
		return fmt.Errorf("%w; fix the writer, or set --invalid-rows=dead-letter to divert such messages", err)
	}
	if l.replayed(key) {
		return nil
	}
	l.log.Warn("malformed outbox message routed to the dead-letter topic", "lsn", m.LSN.String(), "xid", m.XID, "err", err)
	rec := router.MessageDeadLetter(l.cfg.DeadLetterTopic, m.Content, m.Prefix, m.LSN, m.XID, m.CommitTime, err.Error())
	im := &inflightRecord{txn: l.txn, key: key, lsn: m.LSN, xid: m.XID, prefix: m.Prefix, commitTime: m.CommitTime, deadLetter: true}
	rec, err = l.checkSize(rec, im)
	if err != nil {
		return err
	}
	l.txn.Add(1)
	l.remember(key)
	l.produce(rec, im)
	return nil
}

// handleNonTransactional handles a message written with
// pg_logical_emit_message(false, ...). The server decodes it as soon as it
// is written, outside any commit, and sends it at once: it is not part of
// the business transaction and may describe work that was rolled back, so
// it is not an event. Stopping on it would stop walbox for good (the same
// position fails on every start), so it is dead-lettered when a dead-letter
// topic is set and skipped otherwise, with a metric and a warning either way.
//
// Confirming around it: a skipped message needs nothing, as later commits
// and keepalives confirm past it. A dead-lettered one gets a transaction of
// its own in the tracker that ends at the message's LSN (the end of its WAL
// record): nothing after it is confirmed before Kafka acknowledges it, and
// a restart from that position skips it (the server sends a
// non-transactional message only if its record starts at or after the start
// position) while still sending a transaction whose commit record starts
// there.
func (l *loop) handleNonTransactional(m *decoder.Message) error {
	if l.cfg.MessagePrefix == "" || m.Prefix != l.cfg.MessagePrefix {
		return nil
	}
	key := replayKey{commit: m.LSN, ord: nonTransactional}
	l.lastCommit = max(l.lastCommit, m.LSN)
	if l.delivery.skips(key) {
		// Dead-lettered and committed in Kafka before: counted and
		// logged as a skipped unit, like a transaction.
		l.delivery.unitDone(key, m.LSN)
		return nil
	}
	if l.replayed(key) {
		return nil
	}
	const advice = "emit outbox messages with pg_logical_emit_message(true, ...) inside the business transaction, and revoke EXECUTE on pg_logical_emit_message from roles that are not writers"
	if l.cfg.DeadLetterTopic == "" {
		l.metrics.nonTransactionalSkipped.Inc()
		l.log.Warn("skipped a non-transactional outbox message: it is not part of any transaction, so it is not an event; set a dead-letter topic to keep such messages",
			"lsn", m.LSN.String(), "prefix", m.Prefix, "advice", advice)
		return nil
	}
	reason := fmt.Sprintf("outbox message at %s with prefix %q is not transactional: %s", m.LSN, m.Prefix, advice)
	l.log.Warn("non-transactional outbox message routed to the dead-letter topic",
		"lsn", m.LSN.String(), "prefix", m.Prefix, "dead_letter_topic", l.cfg.DeadLetterTopic)
	rec := router.MessageDeadLetter(l.cfg.DeadLetterTopic, m.Content, m.Prefix, m.LSN, 0, time.Time{}, reason)
	txn := l.txn
	standalone := txn == nil
	if standalone {
		txn = l.tracker.Begin()
	}
	im := &inflightRecord{txn: txn, key: key, lsn: m.LSN, prefix: m.Prefix, commitTime: time.Now(), deadLetter: true}
	rec, err := l.checkSize(rec, im)
	if err != nil {
		if standalone {
			l.tracker.Abandon()
		}
		return err
	}
	txn.Add(1)
	if standalone {
		l.tracker.Commit(txn, m.LSN)
	}
	l.remember(key)
	l.produce(rec, im)
	if standalone {
		l.delivery.unitDone(key, m.LSN)
	}
	return nil
}

// inflightRecord is what the promise of one record needs to settle it. It
// travels as the record's Context, so one promise function serves every
// record and producing costs no closure per event. The embedded Context is
// context.Background(), or derived from it with only the event's span
// (Config.Tracer) as a value: never a deadline or a cancellation, since
// franz-go consults Record.Context to cancel a record, and walbox never
// gives up on one.
type inflightRecord struct {
	context.Context
	txn        *checkpoint.Txn
	key        replayKey
	eventID    string
	lsn        pglogrepl.LSN
	xid        uint32
	rel        *decoder.Relation // nil for a malformed outbox message
	prefix     string            // the message prefix, when rel is nil
	commitTime time.Time
	deadLetter bool
	size       int64
	// rejected is the broker's or client's refusal of the original record
	// when it is re-sent to the dead-letter topic.
	rejected error
}

// table names where the record came from, for dead-letter headers.
func (m *inflightRecord) table() string {
	if m.rel != nil {
		return m.rel.QualifiedName()
	}
	return router.MessageTable(m.prefix)
}

// origin names where the record came from, for dead-letter headers.
func (m *inflightRecord) origin() router.Origin {
	return router.Origin{Table: m.table(), LSN: m.lsn, XID: m.xid}
}

// produce hands rec to the producer: the point where a record is produced.
// Only the loop calls it, after checking the in-flight limit, so Produce
// never blocks.
func (l *loop) produce(rec *kgo.Record, m *inflightRecord) {
	m.Context = l.cfg.Tracer.Start(rec, tracing.Event{ReadAt: l.txnReadAt, CommitLSN: m.key.commit, CommitTime: m.commitTime, EventID: m.eventID, DeadLetter: m.deadLetter})
	m.size = recordSize(rec)
	rec.Context = m
	l.inflight.add(m.size)
	if !l.delivery.produce(rec) {
		return // held back by the delivery mode (queued while a commit runs)
	}
	l.producer.Produce(l.produceCtx, rec, l.promise)
}

// settle runs in a franz-go callback goroutine; promise (built once per
// session) calls it with the record's inflightRecord. It is the point where
// a record is acknowledged (err nil) or refused.
func (l *loop) settle(rec *kgo.Record, m *inflightRecord, err error) {
	l.cfg.Tracer.End(m.Context, rec, err)
	if err != nil && l.delivery.refused(rec, m, err) {
		return
	}
	if err != nil && errors.Is(err, kgo.ErrAborting) {
		// Purged after the session ended (flushLostSession): not
		// confirmed, so the slot's next holder sends it again.
		l.inflight.release(m.size)
		return
	}
	if err != nil {
		l.metrics.produceErrors.Inc()
		if tooLarge(err) && !recordTooLarge(rec, l.cfg.MaxBatchBytes) {
			// The broker refused the batch this record was in, not
			// this record: dead-lettering it would divert a valid
			// event. Only an operator can fix the limits.
			l.inflight.release(m.size)
			l.fail(&ProduceError{Topic: rec.Topic, EventID: m.eventID, LSN: m.lsn, Err: fmt.Errorf(
				"%w; the record itself is %d bytes, so its batch was refused: the topic's max.message.bytes is below --producer-batch-max-bytes (%d), lower that flag to at most the topic's limit",
				err, recordSize(rec), l.cfg.MaxBatchBytes)})
			return
		}
		if l.cfg.DeadLetterTopic != "" && !m.deadLetter && recordRejected(err) {
			// The record itself is unacceptable (too large, say):
			// under the dead-letter policy it goes to the dead-letter
			// topic instead. The loop produces it, because a promise
			// must not block on the producer's buffer. The in-flight
			// slot is released only after queueing, so the loop is
			// woken with the record already there.
			m.rejected = err
			l.reroute.push(rec, m)
			l.inflight.release(m.size)
			return
		}
		l.inflight.release(m.size)
		l.fail(&ProduceError{Topic: rec.Topic, EventID: m.eventID, LSN: m.lsn, Err: err})
		return
	}
	l.inflight.release(m.size)
	l.inflight.acked() // ackhealth.go
	l.delivery.acked(m.key)
	l.metrics.eventsProduced.Inc()
	if m.deadLetter {
		l.metrics.eventsDeadLettered.Inc()
	}
	// Latency is observed once per transaction, at its last ack: the
	// figure operators want, without a clock read per event.
	if m.txn.Ack() == 0 {
		now := time.Now()
		l.metrics.commitToAck.Observe(now.Sub(m.commitTime).Seconds())
		l.metrics.lastAck.Set(float64(now.UnixNano()) / 1e9)
	}
}

// recordTooLarge reports whether rec alone comes near the batch limit; the
// margin covers the batch and record headers Kafka counts too.
func recordTooLarge(rec *kgo.Record, maxBatchBytes int) bool {
	return recordSize(rec) > int64(maxBatchBytes)-512
}

// produceRerouted sends records Kafka refused to the dead-letter topic.
func (l *loop) produceRerouted() {
	for _, r := range l.reroute.take() {
		dl := router.RefusedRecord(r.rec, r.m.origin(), l.cfg.DeadLetterTopic,
			fmt.Sprintf("kafka refused the record for topic %q (%d bytes): %v", r.rec.Topic, len(r.rec.Value), r.m.rejected),
			tooLarge(r.m.rejected))
		r.m.deadLetter = true
		l.log.Warn("kafka refused an outbox record; routed to the dead-letter topic",
			"event_id", r.m.eventID, "lsn", r.m.lsn.String(), "xid", r.m.xid, "topic", r.rec.Topic,
			"dead_letter_topic", l.cfg.DeadLetterTopic, "err", r.m.rejected)
		l.produce(dl, r.m)
	}
}

func recordSize(rec *kgo.Record) int64 {
	n := len(rec.Key) + len(rec.Value) + len(rec.Topic)
	for _, h := range rec.Headers {
		n += len(h.Key) + len(h.Value)
	}
	return int64(n)
}

// sendStatus reports the confirmed position. Write, flush and apply are all
// set to it explicitly: pglogrepl copies the write position into an unset
// flush position, and the slot's confirmed_flush_lsn follows flush.
func (l *loop) sendStatus(ctx context.Context) error {
	lsn := l.tracker.Confirmed()
	l.nextStatus = time.Now().Add(l.cfg.StatusInterval)
	lsn, ok := l.delivery.mayConfirm(lsn)
	if !ok {
		return nil // another producer owns the id: confirm nothing more
	}
	if lsn == 0 {
		return nil
	}
	err := pglogrepl.SendStandbyStatusUpdate(ctx, l.conn, pglogrepl.StandbyStatusUpdate{
		WALWritePosition: lsn,
		WALFlushPosition: lsn,
		WALApplyPosition: lsn,
		ClientTime:       time.Now(),
		// Ask for a keepalive when the server has been quiet, so a live
		// connection always answers within the receive timeout. While it
		// decodes a large transaction the server reads replies only every
		// wal_sender_timeout/2, so the request must already be waiting
		// then: a quarter of the timeout (at least wal_sender_timeout)
		// leaves the answer a quarter of it to spare.
		ReplyRequested: time.Since(l.lastReceive) > l.receiveTimeout/4,
	})
	if err != nil {
		return &connectionLostError{err: fmt.Errorf("send standby status update at %s: %w", lsn, err)}
	}
	if lsn != l.sentLSN {
		l.log.Debug("confirmed", "slot", l.cfg.Slot, "lsn", lsn.String())
		l.sentLSN = lsn
	}
	l.metrics.confirmedLSN.Set(float64(lsn))
	l.confirmed.Store(uint64(lsn))
	return nil
}

// drain waits, within ctx, for every record in flight (and the dead-letter
// records Kafka's refusals turn into), then flushes the producer.
func (l *loop) drain(ctx context.Context) {
	for l.inflight.records.Load() > 0 && ctx.Err() == nil {
		l.produceRerouted()
		l.waitForAcks(ctx)
	}
	l.produceRerouted()
	if err := l.producer.Flush(ctx); err != nil {
		l.log.Warn("stopping with records still in flight; they will be sent again on the next start",
			"err", err, "inflight_records", l.inflight.records.Load())
	}
}

// confirmBeforeFailing runs before the loop returns a permanent error (an
// invalid row, an undecodable message, a record Kafka refused): the events
// committed before the bad one still reach Kafka and the slot is confirmed
// up to them, so one bad row does not hold back everything before it and a
// restart starts exactly at the bad row. Nothing past it is confirmed: its
// transaction is still open or unacknowledged.
func (l *loop) confirmBeforeFailing(cause error) {
	sctx, cancel := context.WithTimeout(context.Background(), l.cfg.ShutdownTimeout)
	defer cancel()
	if l.delivery.fencedOff() {
		return
	}
	l.delivery.settle(sctx)
	l.drain(sctx)
	l.delivery.finish(sctx)
	if err := l.sendStatus(sctx); err != nil {
		l.log.Warn("could not confirm the events before the failure", "err", err, "cause", cause)
		return
	}
	l.endStream(sctx)
}

// endStream ends the replication stream with CopyDone and waits, within
// ctx, for the server's answer. The server reads a client's messages in
// order, so once it has answered, the status update sent before is applied
// to the slot. Closing the connection without this races: a walsender busy
// sending fails on the closed socket and may exit before it reads the final
// status update, and the next start then begins from an older position and
// sends again what Kafka had acknowledged. What the server still sends
// meanwhile is discarded: nothing of it was confirmed.
func (l *loop) endStream(ctx context.Context) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(5 * time.Second)
	}
	err := l.conn.Conn().SetReadDeadline(deadline)
	if err == nil {
		l.readDeadline = deadline
		_, err = pglogrepl.SendStandbyCopyDone(ctx, l.conn)
	}
	if err != nil {
		l.log.Warn("could not end the replication stream cleanly; if the server did not record the final position, the next start sends again what was acknowledged since the previous one",
			"err", err, "slot", l.cfg.Slot, "confirmed_lsn", l.sentLSN.String())
	}
}

// stop shuts the session down cleanly: finish receiving the open transaction
// (so the next start does not resend its first half), wait for every
// in-flight ack, then confirm what they cover. Each step is bounded by
// ShutdownTimeout; what is not confirmed is simply sent again next time.
func (l *loop) stop() error {
	sctx, cancel := context.WithTimeout(context.Background(), l.cfg.ShutdownTimeout)
	defer cancel()
	// No commit runs from here on: records are produced, not queued.
	l.delivery.settle(sctx)
	for l.dec.InTransaction() && sctx.Err() == nil && l.failureErr() == nil {
		l.produceRerouted()
		if l.inflight.full() {
			l.waitForAcks(sctx)
			continue
		}
		if sc := l.stream.replaying(); sc != nil {
			if err := l.replayStep(); err != nil {
				l.log.Warn("could not finish the streamed transaction before stopping; it will be sent again on the next start",
					"err", err, "xid", sc.XID, "lsn", sc.CommitLSN.String())
				break
			}
			continue
		}
		deadline, _ := sctx.Deadline()
		if err := l.receive(deadline); err != nil {
			if pgconn.Timeout(err) {
				continue
			}
			l.log.Warn("could not finish the open transaction before stopping; it will be sent again on the next start",
				"err", err, "lsn", l.received.String())
			break
		}
	}
	if l.dec.InTransaction() {
		l.tracker.Abandon()
	}
	l.delivery.settle(sctx)
	l.drain(sctx)
	l.delivery.finish(sctx)
	if err := l.failureErr(); err != nil {
		return err
	}
	if err := l.sendStatus(sctx); err != nil {
		return fmt.Errorf("final status update: %w", err)
	}
	l.endStream(sctx)
	l.log.Info("stopped", "slot", l.cfg.Slot, "confirmed_lsn", l.tracker.Confirmed().String())
	return nil
}
