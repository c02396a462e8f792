package pipeline_test

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/retention"
	"github.com/walbox/walbox/slotctl"
)

// The topologies and faults of issue 26 that a primary with one standby
// does not build: two standbys promoted one after the other, and a
// replication connection that reaches a lagging hot standby.

// delivery follows what walbox delivers against what was written.
type delivery struct {
	t        *testing.T
	ctx      context.Context
	consumer *outboxtest.Consumer
	gen      *outboxtest.Generator
	kept     []outboxtest.Event // on the server walbox ends on
	erased   []outboxtest.Event // delivered, then lost with a server
	got      []outboxtest.Received
}

func newDelivery(t *testing.T, ctx context.Context, brokers []string) *delivery {
	t.Helper()
	consumer, err := outboxtest.NewConsumer(brokers, `outbox\.event\..*`)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(consumer.Close)
	return &delivery{t: t, ctx: ctx, consumer: consumer, gen: outboxtest.NewGenerator(26, 20)}
}

// write commits txns transactions of size events each on conn.
func (d *delivery) write(conn *pgx.Conn, txns, size int) []outboxtest.Event {
	d.t.Helper()
	var out []outboxtest.Event
	for range txns {
		evs := d.gen.Batch(size)
		if err := outboxtest.WriteTx(d.ctx, conn, evs); err != nil {
			d.t.Fatal(err)
		}
		out = append(out, evs...)
	}
	return out
}

// readAll waits until every kept and erased event was consumed.
func (d *delivery) readAll(what string) {
	d.t.Helper()
	n := len(d.kept) + len(d.erased)
	rctx, cancel := context.WithTimeout(d.ctx, 20*time.Second)
	defer cancel()
	rest, err := d.consumer.ReadUntil(rctx, func(r []outboxtest.Received) bool {
		return outboxtest.DistinctIDs(append(d.got, r...)) >= n
	})
	d.got = append(d.got, rest...)
	if err != nil {
		d.t.Fatalf("%s: %v (%v)", what, err, outboxtest.Check(append(append([]outboxtest.Event(nil), d.kept...), d.erased...), d.got))
	}
}

func (d *delivery) check(what string, eos bool) {
	d.t.Helper()
	rep := outboxtest.Check(append(append([]outboxtest.Event(nil), d.kept...), d.erased...), d.got)
	d.t.Logf("%s: %v", what, rep)
	if !rep.OK() {
		d.t.Fatalf("%s: %v", what, rep)
	}
	if eos && rep.Duplicates != 0 {
		d.t.Errorf("%s, exactly-once: %d duplicates", what, rep.Duplicates)
	}
}

func currentLSN(t *testing.T, ctx context.Context, conn *pgx.Conn) pglogrepl.LSN {
	t.Helper()
	var lsn pglogrepl.LSN
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// replayedTo returns the standby's replayed position.
func replayedTo(t *testing.T, ctx context.Context, srv *pgtest.Server) pglogrepl.LSN {
	t.Helper()
	c, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var lsn pglogrepl.LSN
	if err := c.QueryRow(ctx, `SELECT pg_last_wal_replay_lsn()`).Scan(&lsn); err != nil {
		t.Fatal(err)
	}
	return lsn
}

// TestRelayTellsSiblingTimelinesApart: primary A with standbys B and C and
// no shared WAL archive. C is cut off, A crashes, B is promoted (timeline
// 2) and walbox follows it; B crashes before C is re-pointed, and C is
// promoted on timeline 2 as well, with another history. walbox compared
// timeline numbers only and resumed at its position on B's timeline: C's
// transactions below it were never delivered, and the events of A and B
// that C lacks were not reported. Now the switch points decide: walbox
// resumes where C's history and B's part, delivers every event C holds and
// reports the others erased, at least once and exactly once.
func TestRelayTellsSiblingTimelinesApart(t *testing.T) {
	fulltest.Require(t, "three servers and two promotions, about 13 s per delivery mode")
	v := failoverVersions(t)[0]
	t.Run("at-least-once", func(t *testing.T) { testSiblingTimelines(t, v, false) })
	t.Run("exactly-once", func(t *testing.T) { testSiblingTimelines(t, v, true) })
}

func testSiblingTimelines(t *testing.T, v pgtest.Version, eos bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	a := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
	conn, err := pgx.Connect(ctx, a.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"b", "c"} {
		if _, err := conn.Exec(ctx, `SELECT pg_create_physical_replication_slot($1)`, s); err != nil {
			t.Fatal(err)
		}
	}
	conn.Close(ctx)
	settings := map[string]string{"sync_replication_slots": "on", "hot_standby_feedback": "on"}
	aAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(a.Port()))
	linkB, linkC := faultproxy.New(t, aAddr), faultproxy.New(t, aAddr)
	b := pgtest.Standby(t, a, pgtest.StandbyOptions{PrimaryPort: linkB.Port(), PrimarySlotName: "b", Settings: settings})
	c := pgtest.Standby(t, a, pgtest.StandbyOptions{PrimaryPort: linkC.Port(), PrimarySlotName: "c", Settings: settings})
	if conn, err = pgx.Connect(ctx, a.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	defer func() { conn.Close(context.Background()) }()
	scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true, Failover: true}
	if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
		t.Fatal(err)
	}
	slot, err := slotctl.EnsureSlot(ctx, conn, scfg)
	if err != nil {
		t.Fatal(err)
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	p := &failoverPair{primary: a, standby: b, brokers: cluster.ListenAddrs(), fc: failoverCase{eos: eos},
		endpoint: faultproxy.New(t, aAddr)}
	p.startRelay(t, slot.ConfirmedFlushLSN)
	d := newDelivery(t, ctx, p.brokers)

	// Shared by all three.
	d.kept = append(d.kept, d.write(conn, 50, 4)...)
	d.readAll("consume the shared history")
	pos := currentLSN(t, ctx, conn)
	waitFor(t, 30*time.Second, "walbox to confirm the shared history", func() bool {
		c, _ := walboxSlot(t, ctx, a)
		return c >= pos
	})
	waitFor(t, 60*time.Second, "both standbys to synchronize the slot", func() bool {
		if _, err := conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		cb, okb := walboxSlot(t, ctx, b)
		cc, okc := walboxSlot(t, ctx, c)
		return okb && okc && cb >= pos && cc >= pos
	})

	// C is cut off; B receives what walbox streams from A.
	linkC.Drop()
	d.erased = append(d.erased, d.write(conn, 40, 4)...)
	d.readAll("consume what C lacks")
	pos = currentLSN(t, ctx, conn)
	waitFor(t, 30*time.Second, "walbox to confirm what C lacks, and B to replay it", func() bool {
		c, _ := walboxSlot(t, ctx, a)
		return c >= pos && replayedTo(t, ctx, b) >= pos
	})

	// A crashes, B is promoted, walbox follows it.
	if err := a.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(b.Port()))); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if conn, err = pgx.Connect(ctx, b.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	d.erased = append(d.erased, d.write(conn, 40, 4)...)
	d.readAll("consume on B")
	pos = currentLSN(t, ctx, conn)
	waitFor(t, 30*time.Second, "walbox to confirm on B", func() bool {
		c, _ := walboxSlot(t, ctx, b)
		return c >= pos
	})
	onB := p.relay.Confirmed()

	// B crashes; C is promoted on timeline 2 too, and writes more WAL
	// than walbox streamed from B before walbox reaches it.
	if err := b.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	if conn, err = pgx.Connect(ctx, c.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	for currentLSN(t, ctx, conn) <= onB+0x4000 {
		d.kept = append(d.kept, d.write(conn, 20, 4)...)
	}
	t.Logf("C wrote %d events up to %s; walbox confirmed %s on B", len(d.kept), currentLSN(t, ctx, conn), onB)
	if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(c.Port()))); err != nil {
		t.Fatal(err)
	}
	d.kept = append(d.kept, d.write(conn, 10, 4)...)
	d.readAll("consume on C")
	d.check("after the second promotion", eos)
	if n := metricValue(t, p.reg, "walbox_failover_erased_events_total"); n != float64(len(d.erased)) {
		t.Errorf("walbox_failover_erased_events_total = %v, want %d (the events of A and B that C lacks)", n, len(d.erased))
	}
}

// TestRelayIsNotMisledByAHotStandby: the replication connection reaches a
// lagging hot standby (a DNS name or VIP that flaps, a multi-host DSN
// without target_session_attrs) while the primary never failed. walbox took
// the standby's shorter WAL for a restore from an older backup, reported
// every event the standby lacks as erased, then stopped for good on
// START_REPLICATION's SQLSTATE 55000. Now it reports nothing, keeps
// reconnecting, and streams on once the connection reaches the primary
// again, losing nothing.
func TestRelayIsNotMisledByAHotStandby(t *testing.T) {
	parallel(t)
	v := failoverVersions(t)[0]
	// Exactly once in the full run only (about 5.5 s each).
	for _, eos := range fulltest.Pick([]bool{false}, []bool{false, true}) {
		name := "at-least-once"
		if eos {
			name = "exactly-once"
		}
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			p := startFailoverPair(t, ctx, v, failoverCase{eos: eos})
			d := newDelivery(t, ctx, p.brokers)
			d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
			d.readAll("consume before the standby lags")
			p.link.Drop()
			d.kept = append(d.kept, d.write(p.conn, 40, 4)...)
			d.readAll("consume while the standby lags")
			pos := currentLSN(t, ctx, p.conn)
			waitFor(t, 30*time.Second, "walbox to confirm what the standby lacks", func() bool {
				c, _ := walboxSlot(t, ctx, p.primary)
				return c >= pos
			})

			// The endpoint flaps to the standby.
			reconnects := metricValue(t, p.reg, "walbox_postgres_reconnects_total")
			if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.standby.Port()))); err != nil {
				t.Fatal(err)
			}
			p.endpoint.CloseAll()
			waitFor(t, 30*time.Second, "walbox to try the standby a few times (or to report an erasure)", func() bool {
				return metricValue(t, p.reg, "walbox_postgres_reconnects_total") >= reconnects+3 ||
					metricValue(t, p.reg, "walbox_failover_erased_events_total") != 0
			})
			if n := metricValue(t, p.reg, "walbox_failover_erased_events_total"); n != 0 {
				t.Errorf("walbox_failover_erased_events_total = %v while the primary never failed, want 0", n)
			}
			if n, _ := p.relay.FailoverErased(); n != 0 {
				t.Errorf("FailoverErased = %d (what /readyz reports), want 0", n)
			}

			// Back to the primary: walbox streams on.
			if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.primary.Port()))); err != nil {
				t.Fatal(err)
			}
			p.endpoint.CloseAll()
			d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
			d.readAll("consume after the endpoint is back on the primary")
			d.check("after the standby", eos)
			if n := metricValue(t, p.reg, "walbox_failover_erased_events_total"); n != 0 {
				t.Errorf("walbox_failover_erased_events_total = %v, want 0", n)
			}
		})
	}
}

// TestRelayReportsAnotherClusterAsSuch: the endpoint walbox streams through
// is moved to another cluster with a slot of the same name (a rebuilt
// cluster, a blue/green switchover, a pg_upgrade of 17+ that keeps slots).
// walbox reported every event it had ever sent as erased by a failover.
// Now it says the server is another cluster, reports nothing erased, and
// streams the other cluster's slot from its own position.
func TestRelayReportsAnotherClusterAsSuch(t *testing.T) {
	fulltest.Require(t, "two clusters, about 8 s")
	v := failoverVersions(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := func() (*pgtest.Server, *pgx.Conn, pglogrepl.LSN) {
		srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
		conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
			t.Fatal(err)
		}
		scfg := slotctl.Config{Table: "public.outbox", Slot: "walbox", Publication: "walbox", CreateMissing: true}
		if err := slotctl.EnsurePublication(ctx, conn, scfg); err != nil {
			t.Fatal(err)
		}
		slot, err := slotctl.EnsureSlot(ctx, conn, scfg)
		if err != nil {
			t.Fatal(err)
		}
		return srv, conn, slot.ConfirmedFlushLSN
	}
	blue, blueConn, from := start()
	green, greenConn, _ := start()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	p := &failoverPair{primary: blue, brokers: cluster.ListenAddrs(),
		endpoint: faultproxy.New(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(blue.Port())))}
	p.startRelay(t, from)
	d := newDelivery(t, ctx, p.brokers)
	d.kept = append(d.kept, d.write(blueConn, 40, 4)...)
	d.readAll("consume from the first cluster")

	if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(green.Port()))); err != nil {
		t.Fatal(err)
	}
	p.endpoint.CloseAll()
	d.kept = append(d.kept, d.write(greenConn, 20, 4)...)
	d.readAll("consume from the other cluster")
	d.check("after the move to another cluster", false)
	if n := metricValue(t, p.reg, "walbox_failover_erased_events_total"); n != 0 {
		t.Errorf("walbox_failover_erased_events_total = %v, want 0: the first cluster's events were not erased", n)
	}
}

// trailingSlot returns the confirmed position of walbox's trailing slot on
// srv, and whether it exists.
func trailingSlot(t *testing.T, ctx context.Context, srv *pgtest.Server) (pglogrepl.LSN, bool) {
	t.Helper()
	c, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var lsn pglogrepl.LSN
	err = c.QueryRow(ctx, `SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = 'walbox_replay' AND confirmed_flush_lsn IS NOT NULL`).Scan(&lsn)
	if err == pgx.ErrNoRows {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return lsn, true
}

// TestReplayWindowSurvivesALossyFailover: --replay-window with a standby
// that lacks the old primary's last transactions. The keeper's history
// kept the old timeline's positions and ignored the new, lower ones, so a
// window after those old positions were confirmed the trailing slot was
// advanced to them, past new-timeline transactions confirmed seconds
// before, which walbox replay could then no longer send. Now the relay's
// history switch rewinds the keeper's history: for a window after the
// failover the trailing slot keeps every new-timeline transaction.
func TestReplayWindowSurvivesALossyFailover(t *testing.T) {
	fulltest.Require(t, "a replay window of 6 s before and after a failover, about 25 s")
	v := failoverVersions(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startFailoverPair(t, ctx, v, failoverCase{})
	const window = 6 * time.Second
	cc, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", p.endpoint.Port()))
	if err != nil {
		t.Fatal(err)
	}
	k, err := retention.New(retention.Config{Slot: "walbox", Window: window, Interval: 200 * time.Millisecond, RetryDelay: 200 * time.Millisecond,
		Rewound: p.relay.HistoryRewound}, cc, p.relay.Confirmed, prometheus.NewRegistry(), testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	kctx, kcancel := context.WithCancel(context.Background())
	kdone := make(chan error, 1)
	go func() { kdone <- k.Run(kctx) }()
	t.Cleanup(func() {
		kcancel()
		if err := <-kdone; err != nil {
			t.Errorf("keeper: %v", err)
		}
	})
	d := newDelivery(t, ctx, p.brokers)
	// writeFor writes a small transaction every 200ms for dur.
	writeFor := func(dur time.Duration) []outboxtest.Event {
		var out []outboxtest.Event
		for end := time.Now().Add(dur); time.Now().Before(end); {
			out = append(out, d.write(p.conn, 1, 4)...)
			tick := time.NewTimer(200 * time.Millisecond)
			select {
			case <-tick.C:
			case <-ctx.Done():
				t.Fatal(ctx.Err())
			}
		}
		return out
	}

	// More than a window of shared history: the trailing slot moves.
	d.kept = append(d.kept, writeFor(window+time.Second)...)
	d.readAll("consume the shared history")
	pos := currentLSN(t, ctx, p.conn)
	waitFor(t, 60*time.Second, "the standby to synchronize both slots", func() bool {
		if _, err := p.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		c, ok := walboxSlot(t, ctx, p.standby)
		_, tok := trailingSlot(t, ctx, p.standby)
		return ok && tok && c >= pos
	})

	// Two seconds of transactions the standby never receives.
	p.link.Drop()
	d.erased = append(d.erased, writeFor(2*time.Second)...)
	d.readAll("consume what the standby lacks")
	pos = currentLSN(t, ctx, p.conn)
	waitFor(t, 30*time.Second, "walbox to confirm what the standby lacks", func() bool {
		return p.relay.Confirmed() >= pos
	})

	if err := p.primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.standby.Port()))); err != nil {
		t.Fatal(err)
	}
	failoverAt := time.Now()
	p.conn.Close(ctx)
	if p.conn, err = pgx.Connect(ctx, p.standby.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	firstNew := currentLSN(t, ctx, p.conn)
	// For the window after the failover, every new transaction must stay
	// in the trailing slot (its position at most the first one's start).
	for time.Since(failoverAt) < window-time.Second {
		d.kept = append(d.kept, d.write(p.conn, 1, 4)...)
		if tr, ok := trailingSlot(t, ctx, p.standby); ok && tr > firstNew {
			n, to := p.relay.HistoryRewound()
			t.Fatalf("%s after the failover (window %s) the trailing slot is at %s, past the new timeline's first transaction at %s (live slot confirmed %s; %d history switches, the last to %s): walbox replay can no longer send new transactions confirmed within the window",
				time.Since(failoverAt).Round(time.Millisecond), window, tr, firstNew, p.relay.Confirmed(), n, to)
		}
		tick := time.NewTimer(200 * time.Millisecond)
		<-tick.C
	}
	d.readAll("consume on the new primary")
	d.check("after the failover", false)
	// Then it moves on with the new history.
	waitFor(t, 30*time.Second, "the trailing slot to move on the new timeline", func() bool {
		d.kept = append(d.kept, d.write(p.conn, 1, 4)...)
		tr, _ := trailingSlot(t, ctx, p.standby)
		return tr > firstNew
	})
}

// TestRelayDecodesFromAStandbyOnlyWhenTold: with DecodeFromStandby
// (walbox run's --heartbeat-interval=0) a relay streams a slot of a hot
// standby (PostgreSQL 16+) and delivers what the primary commits; on the
// standby's synchronized copy of a failover slot, which cannot be decoded,
// START_REPLICATION's SQLSTATE 55000 is retried instead of stopping walbox.
func TestRelayDecodesFromAStandbyOnlyWhenTold(t *testing.T) {
	fulltest.Require(t, "a primary, a standby and two relays on it, about 7 s")
	v := failoverVersions(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startFailoverPair(t, ctx, v, failoverCase{})
	created := make(chan error, 1)
	go func() {
		c, err := pgx.Connect(ctx, p.standby.DSN("postgres"))
		if err == nil {
			_, err = c.Exec(ctx, `SELECT pg_create_logical_replication_slot('walbox_sb', 'pgoutput')`)
			c.Close(context.Background())
		}
		created <- err
	}()
	waitFor(t, 60*time.Second, "a logical slot on the standby", func() bool {
		if _, err := p.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-created:
			if err != nil {
				t.Fatal(err)
			}
			return true
		default:
			return false
		}
	})
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.AllowAutoTopicCreation(), kfake.DefaultNumPartitions(4))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	standbyDSN := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", p.standby.Port())
	onStandby := *p
	onStandby.brokers = cluster.ListenAddrs()
	onStandby.fc = failoverCase{slot: "walbox_sb", dsn: standbyDSN, decodeFromStandby: true}
	onStandby.startRelay(t, 0)
	waitFor(t, 60*time.Second, "the standby to synchronize the failover slot", func() bool {
		if _, err := p.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		_, ok := walboxSlot(t, ctx, p.standby)
		return ok
	})
	synced := *p
	synced.fc = failoverCase{dsn: standbyDSN, decodeFromStandby: true}
	synced.startRelay(t, 0)

	d := newDelivery(t, ctx, onStandby.brokers)
	d.kept = d.write(p.conn, 10, 4)
	d.readAll("consume through the standby's slot")
	d.check("decoded on the standby", false)
	waitFor(t, 30*time.Second, "the relay on the synchronized slot to retry", func() bool {
		return metricValue(t, synced.reg, "walbox_postgres_reconnects_total") >= 3
	})
}
