package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
)

// A replication connection can stop delivering while both ends are alive.
// Issue 29 saw it after a Kafka broker crash: walbox had stopped reading
// while its in-flight window was full, and when it read again nothing came;
// the walsender sat in WalSenderWriteData (blocked writing to walbox's
// socket) with sent_lsn frozen, walbox's socket receive queue was empty,
// and the server's side held megabytes unsent behind a 51 KB window with
// its retransmission timer backed off, after the kernel had pruned walbox's
// receive queue. Measured on loopback with a single broker frozen for 25 s
// under 1,000 events/s (exactly once): walbox's socket held 4.8 MB in a
// 12 MB receive buffer (the walsender's many small messages cost far more
// kernel memory than their bytes), the kernel had dropped 14 segments and
// run its pruning about 1,200 times per freeze, and the server's side sat
// in zero-window probing, 4 MB unsent, its timer backed off 5 times
// (7.5 s; the backoff doubles up to 2 minutes). Whether the stream then
// stalls depends on whether a dropped segment's retransmission is still
// waiting for that timer when walbox reads again: in those four freezes it
// was not, and the stream went on within 0.5 s; in issue 29's runs it was,
// 5 times in 10. TCP recovers from that only when a backed-off timer fires;
// the server cannot send a keepalive (its output is what is stuck) and sees
// walbox's status updates arrive, so neither its wal_sender_timeout nor
// walbox's receive timeout (a minute) notices before the stream is a minute
// late.
//
// The stall watch asks the server over a side connection, once a second,
// what the session's walsender waits for. A walsender that has been waiting
// to write to walbox the whole time walbox has been reading and receiving
// nothing, for stallAfter, means bytes the server sent are not arriving:
// the session ends as a lost connection and the next one starts from the
// confirmed position (duplicates are skipped as after any reconnect).
// While walbox does not read (in-flight window full) the silence is not
// counted, as for the receive timeout.
//
// The side connection is an ordinary one with Config.ConnString (the role
// needs a login to the database, as for --standby); a role that has none
// leaves the watch off with one warning, and the receive timeout is then
// the bound. It reads pg_stat_activity, where a role sees its own
// backends' wait events.

// stallAfter is how long the walsender must be seen blocked writing while
// walbox, reading, receives nothing before the session is given up. A
// variable for tests.
var stallAfter = 5 * time.Second

// stallSampleInterval is how often the side connection reads the
// walsender's wait event.
const stallSampleInterval = time.Second

// walSenderWriteData is the wait event of a walsender blocked writing to
// its client's socket.
const walSenderWriteData = "WalSenderWriteData"

// stallWatch is what the watch goroutine has seen; the loop reads it.
type stallWatch struct {
	pid uint32 // the walsender's
	// writingSince is the Unix nanosecond time of the first of the
	// consecutive samples, up to the latest one, that saw the walsender in
	// WalSenderWriteData; 0 when the latest sample did not.
	writingSince atomic.Int64
	// lastSample is when the latest sample was taken (Unix nanoseconds).
	lastSample atomic.Int64
}

// watchStall starts the stall watch of this session's walsender; stop ends
// it and waits for it.
func (l *loop) watchStall(ctx context.Context) (stop func()) {
	pid := l.conn.PID()
	w := &stallWatch{pid: pid}
	l.stall = w
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.run(ctx, l.cfg, l.log, pid)
	}()
	return func() { cancel(); <-done }
}

func (w *stallWatch) run(ctx context.Context, cfg *Config, log *slog.Logger, pid uint32) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	warned := false
	t := time.NewTicker(stallSampleInterval)
	defer t.Stop()
	for {
		event, err := walSenderWaitEvent(ctx, &conn, cfg.ConnString, pid)
		now := time.Now().UnixNano()
		switch {
		case err == nil:
			if event == walSenderWriteData {
				w.writingSince.CompareAndSwap(0, now)
			} else {
				w.writingSince.Store(0)
			}
			w.lastSample.Store(now)
		case ctx.Err() == nil:
			w.writingSince.Store(0)
			if !warned {
				warned = true
				log.Warn("cannot read the walsender's wait event over a side connection; retrying every second, and until it works a replication connection that stops delivering is noticed only by the receive timeout (grant the walbox role a login to the database, as for --standby; logged once per session)",
					"slot", cfg.Slot, "walsender_pid", pid, "err", err, "receive_timeout", cfg.ReceiveTimeout.String())
			}
			if conn != nil {
				conn.Close(context.Background())
				conn = nil
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// walSenderWaitEvent returns the wait event of the walsender with pid, ""
// when it waits for nothing.
func walSenderWaitEvent(ctx context.Context, conn **pgx.Conn, connString string, pid uint32) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if *conn == nil {
		cfg, err := pgx.ParseConfig(connString)
		if err != nil {
			return "", err
		}
		if _, ok := cfg.RuntimeParams["application_name"]; !ok {
			cfg.RuntimeParams["application_name"] = "walbox"
		}
		delete(cfg.RuntimeParams, "replication") // an ordinary session, whatever the DSN says
		if *conn, err = pgx.ConnectConfig(ctx, cfg); err != nil {
			return "", err
		}
	}
	var event string
	err := (*conn).QueryRow(ctx, `SELECT COALESCE(wait_event, '') FROM pg_catalog.pg_stat_activity WHERE pid = $1 AND backend_type = 'walsender'`, int64(pid)).Scan(&event)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", fmt.Errorf("no walsender with pid %d in pg_stat_activity (the side connection reached another server?)", pid)
	}
	if err != nil {
		return "", fmt.Errorf("read the wait event of walsender %d: %w", pid, err)
	}
	return event, nil
}

// checkStall ends the session when the walsender has been blocked writing
// to it, on every sample for stallAfter, while the loop read and received
// nothing.
func (l *loop) checkStall() error {
	if l.stall == nil {
		return nil
	}
	since := l.stall.writingSince.Load()
	if since == 0 {
		return nil
	}
	from := time.Unix(0, since)
	if l.lastReceive.After(from) {
		from = l.lastReceive
	}
	last := time.Unix(0, l.stall.lastSample.Load())
	if last.Sub(from) < stallAfter || time.Since(last) > 3*stallSampleInterval {
		return nil
	}
	l.metrics.replicationStalls.Inc()
	return &connectionLostError{err: fmt.Errorf("the connection stopped delivering: the walsender (pid %d) has been blocked writing to walbox (%s) for %s while nothing arrived since %s (received up to %s); reconnecting",
		l.stall.pid, walSenderWriteData, time.Since(from).Round(time.Millisecond), l.lastReceive.Format(time.RFC3339Nano), l.received)}
}
