package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
)

// TestRelayIdentifiesAServerBeingPromoted: walbox's primary crashes and
// its connection reaches the standby while it is being promoted. The
// session asked IDENTIFY_SYSTEM first (timeline 1, the standby's replayed
// WAL) and pg_is_in_recovery() after the promotion (false): it streamed the
// promoted server's new timeline recorded as timeline 1. On the next
// reconnect it took its own position on timeline 2 for one on the old
// timeline, reported the events it had streamed there as erased by a
// failover and rewound to the switch point. The server must be asked
// whether it is a standby before what it is: a primary never goes back
// into recovery within a connection.
func TestRelayIdentifiesAServerBeingPromoted(t *testing.T) {
	fulltest.Require(t, "a standby promoted under a session, about 5 s")
	v := failoverVersions(t)[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := startFailoverPair(t, ctx, v, failoverCase{})
	d := newDelivery(t, ctx, p.brokers)
	d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
	d.readAll("consume on the primary")
	pos := currentLSN(t, ctx, p.conn)
	waitFor(t, 60*time.Second, "walbox to confirm, the standby to synchronize the slot and replay", func() bool {
		if _, err := p.conn.Exec(ctx, `SELECT pg_log_standby_snapshot()`); err != nil {
			t.Fatal(err)
		}
		c, _ := walboxSlot(t, ctx, p.primary)
		cs, ok := walboxSlot(t, ctx, p.standby)
		return c >= pos && ok && cs >= pos && replayedTo(t, ctx, p.standby) >= pos
	})

	// The first session that identifies the standby sees it promoted
	// between its questions.
	var armed atomic.Bool
	armed.Store(true)
	promoted := make(chan error, 1)
	var early []outboxtest.Event
	pipeline.SetIdentifyHook(t.Cleanup, func() {
		if !armed.CompareAndSwap(true, false) {
			return
		}
		if err := p.standby.Promote(ctx); err != nil {
			promoted <- err
			return
		}
		// Events committed on the new timeline before the session
		// starts replication.
		c, err := pgx.Connect(ctx, p.standby.DSN("postgres"))
		if err != nil {
			promoted <- err
			return
		}
		defer c.Close(context.Background())
		early = d.write(c, 20, 4)
		promoted <- nil
	})
	if err := p.primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.endpoint.SetTarget(net.JoinHostPort("127.0.0.1", strconv.Itoa(p.standby.Port()))); err != nil {
		t.Fatal(err)
	}
	p.endpoint.CloseAll()
	select {
	case err := <-promoted:
		if err != nil {
			t.Fatal(err)
		}
	case <-ctx.Done():
		t.Fatal("no session identified the standby")
	}
	d.kept = append(d.kept, early...)
	p.conn.Close(ctx)
	var err error
	if p.conn, err = pgx.Connect(ctx, p.standby.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
	d.readAll("consume on the promoted standby")
	pos = currentLSN(t, ctx, p.conn)
	waitFor(t, 30*time.Second, "walbox to confirm on the promoted standby", func() bool {
		c, _ := walboxSlot(t, ctx, p.standby)
		return c >= pos
	})

	// Any reconnect.
	reconnects := metricValue(t, p.reg, "walbox_postgres_reconnects_total")
	p.endpoint.CloseAll()
	waitFor(t, 30*time.Second, "walbox to reconnect", func() bool {
		return metricValue(t, p.reg, "walbox_postgres_reconnects_total") > reconnects && p.relay.Streaming()
	})
	d.kept = append(d.kept, d.write(p.conn, 10, 4)...)
	d.readAll("consume after the reconnect")
	d.check("after the promotion", false)
	if n := metricValue(t, p.reg, "walbox_failover_erased_events_total"); n != 0 {
		t.Errorf("walbox_failover_erased_events_total = %v, want 0: the standby had every event walbox streamed", n)
	}
}

// TestRelayDecodingAStandbyFollowsItsPromotion: walbox decodes a
// standby's own slot on purpose (DecodeFromStandby); the primary crashes
// and the standby is promoted under walbox's session, which streams on
// into the new timeline. The next session must not take what it streamed
// there for events of the old timeline erased by a failover.
func TestRelayDecodingAStandbyFollowsItsPromotion(t *testing.T) {
	fulltest.Require(t, "a standby decoded on purpose, then promoted, about 5 s per delivery mode")
	v := failoverVersions(t)[0]
	t.Run("at-least-once", func(t *testing.T) { testStandbyFollowsPromotion(t, v, false) })
	t.Run("exactly-once", func(t *testing.T) { testStandbyFollowsPromotion(t, v, true) })
}

func testStandbyFollowsPromotion(t *testing.T, v pgtest.Version, eos bool) {
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
	p.stopRelay()
	toStandby := faultproxy.New(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(p.standby.Port())))
	onStandby := *p
	onStandby.fc = failoverCase{slot: "walbox_sb", decodeFromStandby: true, eos: eos,
		dsn: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=2", toStandby.Port())}
	onStandby.startRelay(t, 0)

	d := newDelivery(t, ctx, p.brokers)
	d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
	d.readAll("consume through the standby's slot")

	if err := p.primary.StopImmediate(ctx); err != nil {
		t.Fatal(err)
	}
	if err := p.standby.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	p.conn.Close(ctx)
	var err error
	if p.conn, err = pgx.Connect(ctx, p.standby.DSN("postgres")); err != nil {
		t.Fatal(err)
	}
	d.kept = append(d.kept, d.write(p.conn, 20, 4)...)
	d.readAll("consume on the promoted standby")
	pos := currentLSN(t, ctx, p.conn)
	waitFor(t, 30*time.Second, "walbox to confirm on the promoted standby", func() bool {
		c, _ := slotConfirmed(t, ctx, p.standby, "walbox_sb")
		return c >= pos
	})
	reconnects := metricValue(t, onStandby.reg, "walbox_postgres_reconnects_total")
	toStandby.CloseAll()
	waitFor(t, 30*time.Second, "walbox to reconnect", func() bool {
		return metricValue(t, onStandby.reg, "walbox_postgres_reconnects_total") > reconnects && onStandby.relay.Streaming()
	})
	d.kept = append(d.kept, d.write(p.conn, 10, 4)...)
	d.readAll("consume after the reconnect")
	d.check("after the promotion", eos)
	if n := metricValue(t, onStandby.reg, "walbox_failover_erased_events_total"); n != 0 {
		t.Errorf("walbox_failover_erased_events_total = %v, want 0: walbox streamed the promoted server's own history", n)
	}
}

func slotConfirmed(t *testing.T, ctx context.Context, srv *pgtest.Server, slot string) (pglogrepl.LSN, bool) {
	t.Helper()
	c, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	var lsn *string
	err = c.QueryRow(ctx, `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, slot).Scan(&lsn)
	if errors.Is(err, pgx.ErrNoRows) || lsn == nil {
		return 0, false
	}
	if err != nil {
		t.Fatal(err)
	}
	l, err := pglogrepl.ParseLSN(*lsn)
	if err != nil {
		t.Fatal(err)
	}
	return l, true
}
