package pipeline_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/heartbeat"
	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/logbuf"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// failoverVersions are the installed PostgreSQL versions with failover
// slots (17+): the newest one in the short suite, all of them in the long
// one.
func failoverVersions(t *testing.T) []pgtest.Version {
	t.Helper()
	out := pgtest.VersionsFrom(t, 17, "a failover slot")
	return fulltest.Pick(out[len(out)-1:], out)
}

// failoverPair is a primary with a streaming standby that synchronizes the
// failover slot "walbox", and walbox reaching whichever is the primary
// through one endpoint, as behind a DNS name or a VIP.
type failoverPair struct {
	primary, standby *pgtest.Server
	// link carries the standby's replication connection to the primary;
	// endpoint carries walbox's connections.
	link, endpoint *faultproxy.Proxy
	conn           *pgx.Conn // to the primary, then to the promoted standby
	brokers        []string
	cluster        *kfake.Cluster
	fc             failoverCase
	// mon is the heartbeat monitor, with multiHost.
	mon *heartbeat.Monitor
	// reg, relay and stopRelay are the running walbox's.
	reg       *prometheus.Registry
	relay     *pipeline.Relay
	stopRelay func()
}

// failoverCase is one way of going through a failover.
type failoverCase struct {
	// synchronized makes the primary hold logical changes back until the
	// standby has them (synchronized_standby_slots); otherwise the standby
	// is cut off before the crash and misses what walbox already sent.
	synchronized bool
	// eos runs walbox with --delivery exactly-once.
	eos bool
	// restart: walbox dies right after the promotion, before it has
	// reconnected, and a new process starts from the slot's position on
	// the new primary, as walbox run does.
	restart bool
	// multiHost: walbox reaches the primary through libpq's multi-host
	// form, host=standby,primary with this target_session_attrs, instead
	// of one endpoint that moves.
	multiHost string
	// twice: after the first failover a new standby of the promoted
	// primary synchronizes the slot, and the promoted primary is crashed
	// and its standby promoted in turn (timeline 3).
	twice bool
	// standby runs walbox with --standby.
	standby bool
	// lostFlush is --lost-session-flush-timeout; 0 the default.
	lostFlush time.Duration
	// txnPhase is Config.TxnPhase (exactly once).
	txnPhase func(phase string)
	// slot and dsn replace walbox's slot "walbox" and the endpoint's DSN;
	// decodeFromStandby is Config.DecodeFromStandby.
	slot, dsn         string
	decodeFromStandby bool
}

// startFailoverPair starts the pair and walbox.
func startFailoverPair(t *testing.T, ctx context.Context, v pgtest.Version, fc failoverCase) *failoverPair {
	t.Helper()
	synchronized := fc.synchronized
	p := &failoverPair{fc: fc}
	p.primary = pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
	conn, err := pgx.Connect(ctx, p.primary.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_physical_replication_slot('standby')`); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	p.link = faultproxy.New(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(p.primary.Port())))
	p.standby = pgtest.Standby(t, p.primary, pgtest.StandbyOptions{
		PrimaryPort: p.link.Port(), PrimarySlotName: "standby",
		Settings: map[string]string{"sync_replication_slots": "on", "hot_standby_feedback": "on"},
	})
	// StartStandby restarted the primary: connect again.
	if p.conn, err = pgx.Connect(ctx, p.primary.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.conn.Close(context.Background()) })
	if synchronized {
		// Set after the copy: the promoted standby has no slot "standby",
		// and would hold every logical change back waiting for it.
		if _, err := p.conn.Exec(ctx, `ALTER SYSTEM SET synchronized_standby_slots = 'standby'`); err != nil {
			t.Fatal(err)
		}
		if _, err := p.conn.Exec(ctx, `SELECT pg_reload_conf()`); err != nil {
			t.Fatal(err)
		}
	}
	scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true, Failover: true}
	if err := slotctl.EnsurePublication(ctx, p.conn, scfg); err != nil {
		t.Fatal(err)
	}
	slot, err := slotctl.EnsureSlot(ctx, p.conn, scfg)
	if err != nil {
		t.Fatal(err)
	}

	p.endpoint = faultproxy.New(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(p.primary.Port())))
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	p.brokers, p.cluster = cluster.ListenAddrs(), cluster
	p.startRelay(t, slot.ConfirmedFlushLSN)
	return p
}

// startRelay starts walbox from start, on a registry of its own.
func (p *failoverPair) startRelay(t *testing.T, start pglogrepl.LSN) {
	t.Helper()
	eos := p.fc.eos
	// Captured: a second relay of the same pair gets a registry of its own.
	reg := prometheus.NewRegistry()
	p.reg = reg
	log := testLogger(t)
	limits := pipeline.NewKafkaTopicLimits()
	kc := pipeline.KafkaConfig{Brokers: p.brokers, MaxBufferedRecords: 2001, TopicLimits: limits}
	if eos {
		kc.TransactionalID = pipeline.TransactionalIDFor("walbox")
	}
	var clients []*kgo.Client
	t.Cleanup(func() {
		for _, c := range clients {
			c.Close()
		}
	})
	newClient := func() (*kgo.Client, error) {
		c, err := pipeline.NewKafkaClient(kc, log, reg)
		if err == nil {
			clients = append(clients, c)
		}
		return c, err
	}
	kcl, err := newClient()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", p.endpoint.Port())
	if p.fc.multiHost != "" {
		dsn = fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2&target_session_attrs=%s",
			p.standby.Port(), p.primary.Port(), p.fc.multiHost)
	}
	if p.fc.dsn != "" {
		dsn = p.fc.dsn
	}
	slotName := "walbox"
	if p.fc.slot != "" {
		slotName = p.fc.slot
	}
	cfg := pipeline.Config{
		ConnString: dsn, DecodeFromStandby: p.fc.decodeFromStandby,
		Slot: slotName, Publication: "walbox",
		StatusInterval: 100 * time.Millisecond, DedupWindow: 10000, MaxInflightRecords: 2000,
		BackoffMin: 50 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
		TopicLimits: limits,
		Standby:     p.fc.standby, StandbyRetry: 100 * time.Millisecond, LostSessionFlushTimeout: p.fc.lostFlush,
	}
	if p.fc.multiHost != "" {
		// The heartbeat monitor's ordinary connection goes through the
		// same DSN: it too must find the primary, before and after.
		cc, err := pgx.ParseConfig(dsn)
		if err != nil {
			t.Fatal(err)
		}
		var relay *pipeline.Relay
		if p.mon, err = heartbeat.New(100*time.Millisecond, "walbox", cc, func() bool { return relay != nil && relay.Streaming() }, reg, log); err != nil {
			t.Fatal(err)
		}
		cfg.Heartbeats, cfg.OnHeartbeat = true, p.mon.Seen
		defer func() {
			relay = p.relay
			mctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- p.mon.Run(mctx) }()
			t.Cleanup(func() { cancel(); <-done })
		}()
	}
	if eos {
		cfg.Delivery = pipeline.DeliveryExactlyOnce
		cfg.TransactionMaxRecords, cfg.TransactionMaxInterval = 100, 100*time.Millisecond
		cfg.TxnPhase = p.fc.txnPhase
		cfg.State = pipeline.NewKafkaState(pipeline.KafkaConfig{Brokers: p.brokers}, "walbox.state")
		// A new client per session, as walbox run does.
		cfg.NewTxnProducer = func() (pipeline.TxnProducer, error) { return newClient() }
	}
	if p.relay, err = pipeline.New(cfg, kcl, rt, reg, log); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	relay := p.relay
	go func() { done <- relay.Run(rctx, start) }()
	var once sync.Once
	p.stopRelay = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("relay: %v", err)
			}
		})
	}
	t.Cleanup(p.stopRelay)
}

// walboxSlot returns the confirmed position of the slot on srv, and whether
// it is a synchronized copy (PostgreSQL 17+ standbys).
func walboxSlot(t *testing.T, ctx context.Context, srv *pgtest.Server) (confirmed pglogrepl.LSN, found bool) {
	t.Helper()
	c, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	err = c.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walbox' AND NOT temporary AND confirmed_flush_lsn IS NOT NULL`).Scan(&confirmed)
	if err == pgx.ErrNoRows {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return confirmed, true
}

// TestRelayResumesOnTheSwitchPointAfterAFailover reproduces the lost rows: the
// standby lags (its link to the primary is cut), walbox streams and confirms
// transactions the standby never receives, the primary crashes and the
// standby is promoted. walbox used to ask the new primary to start at its
// own position on the old timeline, beyond the switch point, and the server
// skipped every new transaction committed below it: 160 rows silently lost.
// Now walbox resumes at the switch point, delivers every row the new primary
// holds, in order, and reports what the failover erased.
func TestRelayResumesOnTheSwitchPointAfterAFailover(t *testing.T) {
	parallel(t)
	for _, v := range failoverVersions(t) {
		t.Run(v.String(), func(t *testing.T) { testFailover(t, v, failoverCase{}) })
	}
}

// TestRelayExactlyOnceResumesOnTheSwitchPointAfterAFailover: the same in
// exactly-once mode. The state topic's committed position lies on the old
// timeline beyond the switch point; it must not make walbox skip the new
// timeline's transactions, and nothing is delivered twice.
func TestRelayExactlyOnceResumesOnTheSwitchPointAfterAFailover(t *testing.T) {
	parallel(t)
	for _, v := range failoverVersions(t) {
		t.Run(v.String(), func(t *testing.T) { testFailover(t, v, failoverCase{eos: true}) })
	}
}

// TestRelayRestartedAfterAFailoverResumesFromTheSlot: walbox dies right
// after the promotion, before it has reconnected; the new process starts
// from the synchronized slot's position on the new primary, which is never
// beyond the switch point: every row the new primary holds arrives.
func TestRelayRestartedAfterAFailoverResumesFromTheSlot(t *testing.T) {
	parallel(t)
	for _, v := range failoverVersions(t) {
		t.Run(v.String(), func(t *testing.T) {
			t.Run("at-least-once", func(t *testing.T) { testFailover(t, v, failoverCase{restart: true}) })
			t.Run("exactly-once", func(t *testing.T) { testFailover(t, v, failoverCase{restart: true, eos: true}) })
		})
	}
}

// TestRelayFollowsAFailoverWithSynchronizedStandbySlots: with
// synchronized_standby_slots the primary sends walbox nothing the standby
// lacks, so after the promotion every row arrives and nothing was erased.
func TestRelayFollowsAFailoverWithSynchronizedStandbySlots(t *testing.T) {
	parallel(t)
	for _, v := range failoverVersions(t) {
		t.Run(v.String(), func(t *testing.T) {
			t.Run("at-least-once", func(t *testing.T) { testFailover(t, v, failoverCase{synchronized: true}) })
			t.Run("exactly-once", func(t *testing.T) { testFailover(t, v, failoverCase{synchronized: true, eos: true}) })
		})
	}
}

// TestRelayFollowsAFailoverThroughAMultiHostDSN: with libpq's multi-host
// form (host=a,b) and target_session_attrs, walbox's replication
// connection skips the standby before the failover and finds the promoted
// one after it, without anything moving an endpoint.
func TestRelayFollowsAFailoverThroughAMultiHostDSN(t *testing.T) {
	parallel(t)
	for _, v := range failoverVersions(t) {
		t.Run(v.String(), func(t *testing.T) {
			for _, attrs := range []string{"read-write", "primary"} {
				t.Run(attrs, func(t *testing.T) { testFailover(t, v, failoverCase{multiHost: attrs}) })
			}
		})
	}
}

// testFailover: a writer, the primary crashed mid-stream, the standby
// promoted, in the way fc says.
func testFailover(t *testing.T, v pgtest.Version, fc failoverCase) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startFailoverPair(t, ctx, v, fc)
	synchronized, eos, restart := fc.synchronized, fc.eos, fc.restart
	consumer, err := outboxtest.NewConsumer(p.brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	gen := outboxtest.NewGenerator(19, 20)
	var kept, erased []outboxtest.Event // on the new primary, and not
	write := func(txns, size int) []outboxtest.Event {
		var out []outboxtest.Event
		for range txns {
			evs := gen.Batch(size)
			if err := outboxtest.WriteTx(ctx, p.conn, evs); err != nil {
				t.Fatal(err)
			}
			out = append(out, evs...)
		}
		return out
	}
	var got []outboxtest.Received
	readAll := func(n int, what string) {
		t.Helper()
		rctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		rest, err := consumer.ReadUntil(rctx, func(r []outboxtest.Received) bool {
			return outboxtest.DistinctIDs(append(got, r...)) >= n
		})
		got = append(got, rest...)
		if err != nil {
			t.Fatalf("%s: %v (%v)", what, err, outboxtest.Check(append(kept, erased...), got))
		}
	}

	// Shared history: delivered, confirmed, and the confirmed slot synced
	// to the standby.
	// Each phase has a transaction large enough to stream (streamTxnRows).
	kept = append(kept, write(50, 4)...)
	kept = append(kept, write(1, streamTxnRows)...)
	readAll(len(kept), "consume before the standby lags")
	var primaryPos pglogrepl.LSN
	if err := p.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&primaryPos); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "walbox to confirm the shared history", func() bool {
		c, _ := walboxSlot(t, ctx, p.primary)
		return c >= primaryPos
	})
	waitFor(t, 60*time.Second, "the standby to synchronize the slot", func() bool {
		if _, err := p.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		c, ok := walboxSlot(t, ctx, p.standby)
		return ok && c >= primaryPos
	})

	// The standby is cut off; walbox streams and confirms what it never
	// receives.
	if synchronized {
		kept = append(kept, write(40, 4)...)
		kept = append(kept, write(1, streamTxnRows)...)
	} else {
		p.link.Drop()
		erased = write(40, 4)
		erased = append(erased, write(1, streamTxnRows)...)
	}
	readAll(len(kept)+len(erased), "consume while the standby lags")
	if err := p.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&primaryPos); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "walbox to confirm what the standby lacks", func() bool {
		c, _ := walboxSlot(t, ctx, p.primary)
		return c >= primaryPos
	})

	requireStreamed(t, ctx, p.primary, "walbox", 2)

	// Crash, promote, move the endpoint.
	if err := p.primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if restart {
		// Nothing reaches Postgres meanwhile: its server is gone.
		p.stopRelay()
	}
	if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.standby.Port()))); err != nil {
		t.Fatal(err)
	}
	if restart {
		start, ok := walboxSlot(t, ctx, p.standby)
		if !ok {
			t.Fatal("the promoted standby has no slot walbox")
		}
		p.startRelay(t, start)
	}
	p.conn.Close(ctx)
	if p.conn, err = pgx.Connect(ctx, p.standby.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	// More WAL than the standby missed, so new transactions commit below
	// walbox's old position as well as beyond it.
	kept = append(kept, write(80, 4)...)
	kept = append(kept, write(1, streamTxnRows)...)
	var onNew int
	if err := p.conn.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&onNew); err != nil {
		t.Fatal(err)
	}
	if onNew != len(kept) {
		t.Fatalf("the new primary holds %d rows, want %d", onNew, len(kept))
	}

	readAll(len(kept)+len(erased), "consume after the failover")
	if p.mon != nil {
		// Heartbeats emitted on the new primary come back through its slot.
		seen := p.mon.Received()
		waitFor(t, 30*time.Second, "a heartbeat through the new primary", func() bool { return p.mon.Received() > seen })
	}
	rep := outboxtest.Check(append(append([]outboxtest.Event(nil), kept...), erased...), got)
	t.Logf("after the failover: %v", rep)
	if !rep.OK() {
		t.Fatalf("delivery after the failover: %v", rep)
	}
	if eos && rep.Duplicates != 0 {
		t.Errorf("exactly-once: %d duplicates", rep.Duplicates)
	}
	wantErased := len(erased)
	if restart {
		wantErased = 0 // a new process does not know what the old one sent
	}
	if n := metricValue(t, p.reg, "walbox_failover_erased_events_total"); n != float64(wantErased) {
		t.Errorf("walbox_failover_erased_events_total = %v, want %d (the events of the transactions the standby never received)", n, len(erased))
	}
	requireStreamed(t, ctx, p.standby, "walbox", 1)
	if !fc.twice {
		return
	}

	// A second failover in a row: a standby of the promoted primary, the
	// slot synchronized to it, a crash mid-stream and a promotion again.
	if _, err := p.conn.Exec(ctx, `SELECT pg_create_physical_replication_slot('standby2')`); err != nil {
		t.Fatal(err)
	}
	p.conn.Close(ctx)
	next := pgtest.Standby(t, p.standby, pgtest.StandbyOptions{PrimarySlotName: "standby2",
		Settings: map[string]string{"sync_replication_slots": "on", "hot_standby_feedback": "on"}})
	// StartStandby restarted the primary: connect again (walbox
	// reconnects by itself, on the same timeline).
	if p.conn, err = pgx.Connect(ctx, p.standby.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, write(30, 4)...)
	readAll(len(kept)+len(erased), "consume before the second failover")
	if err := p.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&primaryPos); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "walbox to confirm on the second timeline", func() bool {
		c, _ := walboxSlot(t, ctx, p.standby)
		return c >= primaryPos
	})
	waitFor(t, 60*time.Second, "the second standby to synchronize the slot", func() bool {
		if _, err := p.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		c, ok := walboxSlot(t, ctx, next)
		return ok && c >= primaryPos
	})
	if err := p.standby.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := next.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(next.Port()))); err != nil {
		t.Fatal(err)
	}
	p.conn.Close(ctx)
	if p.conn, err = pgx.Connect(ctx, next.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	kept = append(kept, write(40, 4)...)
	readAll(len(kept)+len(erased), "consume after the second failover")
	rep = outboxtest.Check(append(append([]outboxtest.Event(nil), kept...), erased...), got)
	t.Logf("after the second failover: %v", rep)
	if !rep.OK() || (eos && rep.Duplicates != 0) {
		t.Fatalf("delivery after the second failover: %v", rep)
	}
	if n := metricValue(t, p.reg, "walbox_failover_erased_events_total"); n != float64(wantErased) {
		t.Errorf("walbox_failover_erased_events_total = %v after the second failover, want still %d: the second standby had everything", n, wantErased)
	}
}

// TestRelayFollowsTwoFailoversInARow: the promoted standby gets a standby of
// its own, fails in turn, and walbox follows to timeline 3 through the same
// endpoint, at least once and exactly once, losing nothing.
func TestRelayFollowsTwoFailoversInARow(t *testing.T) {
	parallel(t)
	for _, v := range failoverVersions(t) {
		t.Run(v.String(), func(t *testing.T) {
			t.Run("at-least-once", func(t *testing.T) { testFailover(t, v, failoverCase{twice: true}) })
			t.Run("exactly-once", func(t *testing.T) { testFailover(t, v, failoverCase{twice: true, eos: true}) })
		})
	}
}

// TestHeartbeatShowsAPrimaryWaitingForItsStandby: with
// synchronized_standby_slots, a standby that is down makes the primary hold
// every logical change back (its walsender waits on
// WaitForStandbyConfirmation). walbox used to look healthy and idle; the
// heartbeat monitor now says so, in its log and in
// walbox_slot_waiting_for_standby, and clears both once the standby is back.
func TestHeartbeatShowsAPrimaryWaitingForItsStandby(t *testing.T) {
	parallel(t)
	v := failoverVersions(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startFailoverPair(t, ctx, v, failoverCase{synchronized: true})
	cc, err := pgx.ParseConfig(p.primary.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	reg := prometheus.NewRegistry()
	mon, err := heartbeat.New(200*time.Millisecond, "walbox", cc, p.relay.Streaming, reg, slog.New(slog.NewTextHandler(logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	mctx, mcancel := context.WithCancel(ctx)
	mdone := make(chan error, 1)
	go func() { mdone <- mon.Run(mctx) }()
	defer func() { mcancel(); <-mdone }()

	consumer, err := outboxtest.NewConsumer(p.brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	defer consumer.Close()
	gen := outboxtest.NewGenerator(23, 5)
	var written []outboxtest.Event
	write := func() {
		evs := gen.Batch(2)
		if err := outboxtest.WriteTx(ctx, p.conn, evs); err != nil {
			t.Fatal(err)
		}
		written = append(written, evs...)
	}
	write()
	waitFor(t, 30*time.Second, "the monitor to read the slot", func() bool { return metricValue(t, reg, "walbox_slot_lag_bytes") >= 0 })
	if n := metricValue(t, reg, "walbox_slot_waiting_for_standby"); n != 0 {
		t.Fatalf("walbox_slot_waiting_for_standby = %v with the standby streaming", n)
	}

	p.link.Drop()
	waitFor(t, 30*time.Second, "walbox_slot_waiting_for_standby to show the held-back stream", func() bool {
		write()
		return metricValue(t, reg, "walbox_slot_waiting_for_standby") == 1
	})
	if logs.Count("holds the slot's logical changes back") != 1 || logs.Count("standby_slots_inactive=standby") != 1 {
		t.Errorf("want one warning naming the inactive standby slot:\n%s", logs.Tail(2000))
	}
	p.link.Restore()
	waitFor(t, 30*time.Second, "walbox_slot_waiting_for_standby to clear", func() bool {
		return metricValue(t, reg, "walbox_slot_waiting_for_standby") == 0
	})
	got, err := consumer.ReadUntil(ctx, func(r []outboxtest.Received) bool { return outboxtest.DistinctIDs(r) >= len(written) })
	if err != nil {
		t.Fatalf("consume: %v (%v)", err, outboxtest.Check(written, got))
	}
	if rep := outboxtest.Check(written, got); !rep.OK() {
		t.Fatalf("after the standby came back: %v", rep)
	}
}
