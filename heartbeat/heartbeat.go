// Package heartbeat shows a stalled pipeline even when no business events
// flow. A Monitor emits a transactional logical decoding message with its own
// prefix (Prefix) on an ordinary connection every interval, while the relay
// streams, and the relay hands back each heartbeat it receives through the
// slot (Seen): walbox_heartbeat_lag_seconds is the round trip of the last
// one, growing while one is outstanding. The Monitor also reads the slot's
// lag behind the WAL end and its wal_status from pg_replication_slots every
// interval (walbox_slot_lag_bytes, walbox_slot_wal_status), which show
// while the stream is down too, and whether the server holds logical
// changes back for a standby (walbox_slot_waiting_for_standby): with
// synchronized_standby_slots (PostgreSQL 17+), a standby listed there that
// is down stops the stream, and walbox would otherwise just look idle.
//
// A heartbeat goes through FunctionName (migrations/005_heartbeat_function.sql)
// when the database has it: a SECURITY DEFINER function that can emit only a
// heartbeat, so walbox's role needs no EXECUTE on pg_logical_emit_message,
// which would let its credentials forge outbox messages (--message-prefix).
// Without it walbox calls pg_logical_emit_message itself, which PostgreSQL
// allows every role by default.
package heartbeat

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/prometheus/client_golang/prometheus"
)

// Prefix is the logical decoding message prefix of heartbeats. The relay
// never routes messages with it; --message-prefix may not be it.
const Prefix = "walbox_heartbeat"

// FunctionName is the heartbeat function of
// migrations/005_heartbeat_function.sql, as a regprocedure. It takes the
// instance and the sequence number and builds the content itself, so whoever
// may execute it can emit nothing but a heartbeat.
const FunctionName = "public.walbox_heartbeat(text,bigint)"

// maxOutstanding bounds the heartbeats remembered while none comes back; the
// oldest, which the lag is measured from, is always kept.
const maxOutstanding = 1024

// payload is a heartbeat's content. Instance tells the heartbeats of
// several walbox processes on one database apart (a standby's, or a
// previous process's still in the WAL).
type payload struct {
	Instance string `json:"instance"`
	Seq      uint64 `json:"seq"`
	SentAt   int64  `json:"sent_unix_ns"`
}

type sent struct {
	seq uint64
	at  time.Time
}

// Monitor emits heartbeats and measures the slot's lag. Create it with New,
// run it with Run; Seen is safe for concurrent use.
type Monitor struct {
	interval time.Duration
	slot     string
	cc       *pgx.ConnConfig
	active   func() bool
	standby  func() bool
	log      *slog.Logger
	instance string
	// inRecovery is set while the server is a hot standby (logged once per
	// period): nothing can be emitted there.
	inRecovery bool

	slotLag    prometheus.Gauge
	walStatus  *prometheus.GaugeVec
	standbyGap prometheus.Gauge
	// waitTicks counts the consecutive ticks that found the slot's
	// walsender waiting for standby confirmation; waiting is set (and
	// logged) from the second on.
	waitTicks int
	waiting   bool

	mu          sync.Mutex
	seq         uint64
	outstanding []sent
	lastRTT     time.Duration
	received    uint64
	denied      bool // the last emit failed for lack of privilege (logged once)
	// blindSince is when heartbeats became impossible (the server is in
	// recovery); zero otherwise. Lag counts from it: a lag that cannot be
	// measured is reported as growing, never as a healthy 0.
	blindSince time.Time
	// heldBack mirrors waiting for other goroutines (/readyz), with the
	// inactive standby slots named then.
	heldBack      bool
	heldBackSlots string
}

// New builds a Monitor for slot. cc is an ordinary (not replication)
// connection's configuration. Heartbeats are emitted only while active
// returns true (the relay streams), so a standby emits none.
func New(interval time.Duration, slot string, cc *pgx.ConnConfig, active func() bool, reg prometheus.Registerer, log *slog.Logger) (*Monitor, error) {
	if interval <= 0 {
		return nil, fmt.Errorf("heartbeat interval %s: must be greater than 0", interval)
	}
	var id [4]byte
	_, _ = rand.Read(id[:])
	m := &Monitor{interval: interval, slot: slot, cc: cc, active: active, log: log, instance: hex.EncodeToString(id[:])}
	m.slotLag = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "walbox_slot_lag_bytes",
		Help: "Bytes of WAL between the server's current position and the slot's confirmed_flush_lsn, read every --heartbeat-interval; -1 until read.",
	})
	m.slotLag.Set(-1)
	m.walStatus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "walbox_slot_wal_status",
		Help: "The slot's pg_replication_slots.wal_status, read every --heartbeat-interval: 1 for the current one, 0 for the others; all 0 until read and while the slot is missing.",
	}, []string{"status"})
	m.setWALStatus("")
	m.standbyGap = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "walbox_slot_waiting_for_standby",
		Help: "1 while the server holds the slot's logical changes back until a standby listed in synchronized_standby_slots confirms them (its walsender waits on WaitForStandbyConfirmation on two reads in a row, every --heartbeat-interval), else 0.",
	})
	lag := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "walbox_heartbeat_lag_seconds",
		Help: "Round trip of the last heartbeat through the slot; while one is outstanding, at least the time since it was emitted.",
	}, func() float64 { return m.Lag().Seconds() })
	for _, c := range []prometheus.Collector{m.slotLag, m.walStatus, m.standbyGap, lag} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("register heartbeat metrics: %w", err)
		}
	}
	return m, nil
}

// Lag is the round trip of the last heartbeat seen, or the age of the
// oldest outstanding one when that is greater.
func (m *Monitor) Lag() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	lag := m.lastRTT
	if len(m.outstanding) > 0 {
		lag = max(lag, time.Since(m.outstanding[0].at))
	}
	if !m.blindSince.IsZero() {
		lag = max(lag, time.Since(m.blindSince))
	}
	return lag
}

// WatchStandby makes the Monitor forget its outstanding heartbeats and its
// last round trip whenever standby returns true (the relay's Standby: the
// slot is held by another instance). Without it, an instance that lost the
// slot to another would keep the heartbeats it emitted while active, which
// only the other instance receives now, and report an ever-growing lag.
// Call it before Run.
func (m *Monitor) WatchStandby(standby func() bool) { m.standby = standby }

// forget drops the outstanding heartbeats and the last round trip.
func (m *Monitor) forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outstanding = nil
	m.lastRTT = 0
}

// Received returns how many of its own heartbeats came back through the
// slot.
func (m *Monitor) Received() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.received
}

// Seen is called by the relay with the content of every message with
// Prefix it receives. Heartbeats of other instances, and ones seen again
// after a reconnect, are ignored.
func (m *Monitor) Seen(content []byte) {
	var p payload
	if err := json.Unmarshal(content, &p); err != nil || p.Instance != m.instance {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(m.outstanding) && m.outstanding[i].seq <= p.Seq {
		if m.outstanding[i].seq == p.Seq {
			m.lastRTT = time.Since(m.outstanding[i].at)
			m.received++
		}
		i++
	}
	m.outstanding = m.outstanding[i:]
}

// Run emits heartbeats and reads the slot's lag every interval until ctx
// ends; it returns nil then. Failures are logged and retried at the next
// tick: heartbeats are an observation, never a reason to stop.
func (m *Monitor) Run(ctx context.Context) error {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_ = conn.Close(cctx)
		}
	}()
	t := time.NewTicker(m.interval)
	defer t.Stop()
	for {
		if conn == nil {
			c, err := pgx.ConnectConfig(ctx, m.cc)
			if err != nil && ctx.Err() == nil {
				m.log.Warn("heartbeat: cannot connect to postgres; retrying at the next interval", "err", err)
			}
			conn = c
		}
		if conn != nil && !m.tick(ctx, conn) {
			cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = conn.Close(cctx)
			cancel()
			conn = nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// tick reads the slot's lag and emits a heartbeat; false means the
// connection is unusable.
func (m *Monitor) tick(ctx context.Context, conn *pgx.Conn) bool {
	qctx, cancel := context.WithTimeout(ctx, m.interval)
	defer cancel()
	if m.standby != nil && m.standby() {
		m.forget()
	}
	var recovery, viaFunction bool
	// The function is used only when it is SECURITY DEFINER: then it runs
	// with its owner's rights, never lending walbox's to whoever made it.
	err := conn.QueryRow(qctx, `SELECT pg_catalog.pg_is_in_recovery(),
		COALESCE((SELECT p.prosecdef FROM pg_catalog.pg_proc p WHERE p.oid = pg_catalog.to_regprocedure($1)), false)`,
		FunctionName).Scan(&recovery, &viaFunction)
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("heartbeat: cannot read the server's state", "err", err)
		}
		return !conn.IsClosed() && isSQLError(err)
	}
	m.observeRecovery(recovery)
	var lag *float64
	var status string
	var waiting bool
	var standbysDown string
	// The slot's walsender runs as walbox's role, so its wait event is
	// visible to walbox without pg_read_all_stats. The listed standby slots
	// that are missing or inactive name the likely cause.
	// A hot standby has no pg_current_wal_lsn (it fails during recovery):
	// its WAL end is what it replayed.
	err = conn.QueryRow(qctx, `SELECT pg_wal_lsn_diff(CASE WHEN pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_last_wal_replay_lsn() ELSE pg_catalog.pg_current_wal_lsn() END, s.confirmed_flush_lsn)::float8, COALESCE(s.wal_status, ''),
		COALESCE((SELECT a.wait_event = 'WaitForStandbyConfirmation' FROM pg_catalog.pg_stat_activity a WHERE a.pid = s.active_pid), false),
		COALESCE((SELECT string_agg(n, ',') FROM unnest(string_to_array(current_setting('synchronized_standby_slots', true), ',')) AS u(raw),
			LATERAL (SELECT btrim(raw) AS n) t
			WHERE n <> '' AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_replication_slots p WHERE p.slot_name = n AND p.active)), '')
		FROM pg_catalog.pg_replication_slots s WHERE s.slot_name = $1`, m.slot).Scan(&lag, &status, &waiting, &standbysDown)
	if err == nil || errors.Is(err, pgx.ErrNoRows) {
		m.setWALStatus(status)
		m.observeStandbyWait(waiting, standbysDown)
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		m.slotLag.Set(-1)
	case err != nil:
		if ctx.Err() == nil {
			m.log.Warn("heartbeat: cannot read the slot's lag", "slot", m.slot, "err", err)
		}
		return !conn.IsClosed() && isSQLError(err)
	case lag != nil:
		m.slotLag.Set(*lag)
	}
	if recovery || (m.active != nil && !m.active()) {
		return true
	}
	return m.emit(qctx, conn, viaFunction)
}

// observeRecovery notes whether the server is a hot standby, where no
// heartbeat can be written: it says so once, and the lag grows from then
// on (Lag) until the server accepts writes again.
func (m *Monitor) observeRecovery(recovery bool) {
	if recovery == m.inRecovery {
		return
	}
	m.inRecovery = recovery
	m.mu.Lock()
	defer m.mu.Unlock()
	if recovery {
		m.blindSince = time.Now()
		m.log.Warn("heartbeat: the server is a hot standby (in recovery), so no heartbeat can be emitted and walbox_heartbeat_lag_seconds now counts the time since then instead of a round trip; "+
			"point walbox at the primary, or set --heartbeat-interval=0 where walbox decodes from a standby on purpose",
			"slot", m.slot)
		return
	}
	m.blindSince = time.Time{}
	m.log.Info("heartbeat: the server accepts writes again; emitting heartbeats", "slot", m.slot)
}

// observeStandbyWait records whether the slot's walsender waits for a
// standby to confirm WAL before sending it logical changes. A wait seen
// once may be the normal moment it takes a healthy standby to confirm;
// seen on two reads in a row, one interval apart, the stream is held back.
func (m *Monitor) observeStandbyWait(waiting bool, standbysDown string) {
	if !waiting {
		m.waitTicks = 0
		if m.waiting {
			m.waiting = false
			m.setHeldBack(false, "")
			m.standbyGap.Set(0)
			m.log.Info("the server no longer holds logical changes back for a standby", "slot", m.slot)
		}
		return
	}
	m.waitTicks++
	if m.waitTicks < 2 || m.waiting {
		return
	}
	m.waiting = true
	m.setHeldBack(true, standbysDown)
	m.standbyGap.Set(1)
	m.log.Warn("the server holds the slot's logical changes back until a standby listed in synchronized_standby_slots confirms them (its walsender waits on WaitForStandbyConfirmation): walbox receives nothing meanwhile. "+
		"Bring the standby back, or remove its physical slot from synchronized_standby_slots on the primary (ALTER SYSTEM SET synchronized_standby_slots = ...; SELECT pg_reload_conf()), accepting that a failover to it may then erase events walbox has sent",
		"slot", m.slot, "standby_slots_inactive", standbysDown)
}

func (m *Monitor) setHeldBack(held bool, slots string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.heldBack, m.heldBackSlots = held, slots
}

// WaitingForStandby reports what walbox_slot_waiting_for_standby shows:
// whether the server holds the slot's logical changes back until a
// standby listed in synchronized_standby_slots confirms them, and the
// listed slots that were inactive then (comma-separated, maybe empty).
// Safe for concurrent use.
func (m *Monitor) WaitingForStandby() (bool, string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.heldBack, m.heldBackSlots
}

// walStatuses are the values of pg_replication_slots.wal_status.
var walStatuses = []string{"reserved", "extended", "unreserved", "lost"}

func (m *Monitor) setWALStatus(status string) {
	for _, s := range walStatuses {
		v := 0.0
		if s == status {
			v = 1
		}
		m.walStatus.WithLabelValues(s).Set(v)
	}
}

// execer is the part of *pgx.Conn emit uses.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	IsClosed() bool
}

// emit writes one heartbeat, through FunctionName when viaFunction. The
// heartbeat is registered as outstanding before the statement is sent: the
// relay may receive it through the slot before Exec returns here, and Seen
// must find it then; a failed emit takes it back.
func (m *Monitor) emit(ctx context.Context, conn execer, viaFunction bool) bool {
	m.mu.Lock()
	m.seq++
	s := sent{seq: m.seq, at: time.Now()}
	registered := len(m.outstanding) < maxOutstanding
	if registered {
		m.outstanding = append(m.outstanding, s)
	}
	m.mu.Unlock()
	var err error
	if viaFunction {
		_, err = conn.Exec(ctx, `SELECT `+functionCall+`($1::text, $2::bigint)`, m.instance, int64(s.seq))
	} else {
		content, _ := json.Marshal(payload{Instance: m.instance, Seq: s.seq, SentAt: s.at.UnixNano()})
		_, err = conn.Exec(ctx, `SELECT pg_catalog.pg_logical_emit_message(true, $1::text, $2::text)`, Prefix, string(content))
	}
	if err != nil && registered {
		m.unregister(s.seq)
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42501" { // insufficient_privilege
		if !m.denied {
			m.denied = true
			m.log.Error("heartbeat: "+m.deniedAdvice(ctx, conn, viaFunction), "user", m.cc.User, "err", err)
		}
		return true
	}
	if err != nil {
		if ctx.Err() == nil {
			m.log.Warn("heartbeat: emit failed; retrying at the next interval", "err", err)
		}
		return !conn.IsClosed() && isSQLError(err)
	}
	if m.denied {
		m.denied = false
		m.log.Info("heartbeat: emitting again (the privilege is now granted)")
	}
	return true
}

// functionCall is FunctionName without its argument types.
const functionCall = "public.walbox_heartbeat"

// unregister takes back the outstanding heartbeat seq, whose emit failed.
func (m *Monitor) unregister(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i, o := range m.outstanding {
		if o.seq == seq {
			m.outstanding = append(m.outstanding[:i], m.outstanding[i+1:]...)
			return
		}
	}
}

// adviceTimeout bounds deniedAdvice's lookup of the function's signature.
const adviceTimeout = 5 * time.Second

// deniedAdvice says what to grant after an emit failed for lack of
// privilege, with the signature of pg_logical_emit_message this server has.
func (m *Monitor) deniedAdvice(ctx context.Context, conn execer, viaFunction bool) string {
	role := m.cc.User
	if role == "" {
		role = "<walbox's role>"
	}
	if viaFunction {
		return fmt.Sprintf("this role may not execute %s, so no heartbeat is emitted and walbox_heartbeat_lag_seconds stays 0; "+
			"as a superuser in this database: GRANT EXECUTE ON FUNCTION %s TO %s; or set --heartbeat-interval=0", FunctionName, FunctionName, pgx.Identifier{role}.Sanitize())
	}
	// Not the tick's context: the emit that was refused may have used most
	// of its one interval, and a lookup sent past that deadline makes pgx
	// close the connection and the advice lose the statement to run. Once
	// per refusal, so a few seconds more are cheap; a shutdown still ends it.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), adviceTimeout)
	defer cancel()
	stop := context.AfterFunc(ctx, func() {
		if errors.Is(context.Cause(ctx), context.Canceled) {
			cancel()
		}
	})
	defer stop()
	grant, err := GrantEmitSQL(actx, conn, role)
	if err != nil {
		grant = "GRANT EXECUTE ON FUNCTION pg_catalog.pg_logical_emit_message(...) TO " + pgx.Identifier{role}.Sanitize() + " (\\df pg_logical_emit_message lists the signatures)"
	}
	return "this role may not execute pg_logical_emit_message, so no heartbeat is emitted and walbox_heartbeat_lag_seconds stays 0; " +
		"as a superuser in this database, apply migrations/005_heartbeat_function.sql (a function that can emit only heartbeats, executable by walbox's role), " +
		"or, which also lets this role emit outbox messages for --message-prefix: " + grant + "; or set --heartbeat-interval=0"
}

// GrantEmitSQL returns the statement that grants role EXECUTE on the text
// form of pg_logical_emit_message as this server declares it: PostgreSQL 17
// replaced (boolean, text, text) by (boolean, text, text, boolean), and a
// GRANT naming the old signature fails there. Run it as a superuser.
func GrantEmitSQL(ctx context.Context, conn execer, role string) (string, error) {
	var sig string
	err := conn.QueryRow(ctx, `SELECT p.oid::regprocedure::text FROM pg_catalog.pg_proc p
		WHERE p.proname = 'pg_logical_emit_message' AND p.pronamespace = 'pg_catalog'::regnamespace
		  AND p.proargtypes[2] = 'text'::regtype`).Scan(&sig)
	if err != nil {
		return "", fmt.Errorf("heartbeat: read the signature of pg_logical_emit_message: %w", err)
	}
	return "GRANT EXECUTE ON FUNCTION pg_catalog." + sig + " TO " + pgx.Identifier{role}.Sanitize(), nil
}

// isSQLError reports an error the server answered with: the connection is
// still usable.
func isSQLError(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr)
}
