package snapshot_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
	"github.com/walbox/walbox/snapshot"
)

// capture is a Producer that acknowledges every record at once and keeps it.
type capture struct {
	mu   sync.Mutex
	recs []*kgo.Record
}

func (c *capture) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	c.mu.Lock()
	c.recs = append(c.recs, r)
	c.mu.Unlock()
	promise(r, nil)
}

func (c *capture) Flush(context.Context) error { return nil }

func (c *capture) records() []*kgo.Record {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*kgo.Record(nil), c.recs...)
}

// tableDDL has a jsonb and a bytea payload, jsonb headers, and columns the
// router does not read (a dropped one, a generated one, timestamps), so
// that the relation built from the catalog must line up with pgoutput's.
const tableDDL = `
CREATE TABLE public.outbox (
    id             bigserial   PRIMARY KEY,
    gone           int,
    aggregate_type text        NOT NULL,
    aggregate_id   text        NOT NULL,
    event_type     text,
    payload        jsonb       NOT NULL,
    body           bytea       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}',
    amount         numeric(10,2),
    created_at     timestamptz NOT NULL DEFAULT now(),
    doubled        bigint GENERATED ALWAYS AS (id * 2) STORED,
    sent_at        timestamptz
);
ALTER TABLE public.outbox DROP COLUMN gone;`

// rowsSQL inserts rows whose text forms differ from what a client sent:
// jsonb normalises spacing, key order and duplicate keys; bytea has NUL
// and high bytes; numbers, unicode, escapes and a NULL event type.
const rowsSQL = `
INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, body, headers, amount, created_at) VALUES
 (1, 'order', 'ord-1', 'OrderPlaced', '{"b": 1.50, "a":  [1,2, {"z": null}], "a": "dup"}', '\x00ff10', '{"trace":"t-1","n": 5}', 12.5, '2026-01-02 03:04:05.123456+00'),
 (2, 'order', 'ord-é', NULL, '"just a string \u00e9 \n"', '\x', '{}', NULL, '2026-01-02 03:04:05+00'),
 (3, 'customer', 'c-1', 'Created', '{"emoji": "\ud83d\ude00", "big": 12345678901234567890, "f": 1e-7}', 'plain', '{"k": "v", "k": "w"}', -0.01, '2026-06-30 23:59:59.999999+00')`

// TestSnapshotRecordMatchesWAL: the same rows, read from the snapshot and
// streamed from the slot, give byte-identical records (topic, key, value,
// headers in order), for a jsonb payload and for a bytea one.
//
// It runs on every installed version: the catalog the snapshot reads and
// the pgoutput messages the WAL path decodes both changed across them.
func TestSnapshotRecordMatchesWAL(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		testSnapshotRecordMatchesWAL(t, v.Major, pgtest.WithBinDir(v.BinDir))
	})
}

func testSnapshotRecordMatchesWAL(t *testing.T, major int, opts ...func(*pgtest.Options)) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	pg := pgtest.Start(t, opts...)
	dsn := pg.DSN("postgres")
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, tableDDL); err != nil {
		t.Fatal(err)
	}
	if major >= 18 {
		// PostgreSQL 18 has virtual generated columns (attgenerated 'v'),
		// which pgoutput never sends either.
		if _, err := conn.Exec(ctx, `ALTER TABLE public.outbox ADD COLUMN tripled bigint GENERATED ALWAYS AS (id * 3) VIRTUAL`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, rowsSQL); err != nil {
		t.Fatal(err)
	}

	for _, payload := range []string{"payload", "body"} {
		t.Run(payload, func(t *testing.T) {
			slot := "snap_" + payload
			newRouter := func() *router.Router {
				cols := router.DefaultColumns()
				cols.Payload = payload
				rt, err := router.New(router.Config{Columns: cols})
				if err != nil {
					t.Fatal(err)
				}
				return rt
			}
			scfg := slotctl.Config{Table: "public.outbox", Slot: slot, Publication: slot, CreateOnFirstStart: true}
			snap := &capture{}
			res, err := snapshot.Takeover(ctx, snapshot.Options{
				ConnString: dsn, Slotctl: scfg, Router: newRouter(), Producer: snap,
				Snapshot: snapshot.Config{Mode: snapshot.ModeAll, Order: []string{"id"}},
			})
			if err != nil {
				t.Fatalf("Takeover: %v", err)
			}
			if !res.Taken || res.Stats.Produced != 3 || res.Stats.Total != 3 {
				t.Fatalf("Takeover result %+v, want a snapshot of 3 rows", res)
			}
			// The same rows again, now after the slot: delete (not
			// published) and insert them with identical values.
			if _, err := conn.Exec(ctx, `WITH moved AS (DELETE FROM public.outbox RETURNING *)
INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload, body, headers, amount, created_at)
SELECT id, aggregate_type, aggregate_id, event_type, payload, body, headers, amount, created_at FROM moved ORDER BY id`); err != nil {
				t.Fatal(err)
			}
			wal := streamRecords(ctx, t, dsn, slot, res.Slot.ConfirmedFlushLSN, newRouter(), 3)
			got := snap.records()
			for i := range got {
				if d := diffRecords(got[i], wal[i]); d != "" {
					t.Errorf("row %d: snapshot and WAL records differ: %s", i+1, d)
				}
			}
			if payload == "body" && !bytes.Equal(got[0].Value, []byte{0, 0xff, 0x10}) {
				t.Errorf("bytea payload %x, want the raw bytes 00ff10", got[0].Value)
			}
		})
	}
}

// streamRecords runs the relay on slot from start until it produced n
// records, and returns them.
func streamRecords(ctx context.Context, t *testing.T, dsn, slot string, start pglogrepl.LSN, rt *router.Router, n int) []*kgo.Record {
	t.Helper()
	cfg := pipeline.DefaultConfig()
	cfg.ConnString, cfg.Slot, cfg.Publication = dsn, slot, slot
	cfg.Tables = []string{"public.outbox"}
	cfg.StatusInterval = 50 * time.Millisecond // the relay stops within about one status interval: keeps the test short
	prod := &capture{}
	relay, err := pipeline.New(cfg, prod, rt, prometheus.NewRegistry(), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- relay.Run(rctx, start) }()
	deadline := time.Now().Add(time.Minute)
	for len(prod.records()) < n {
		if time.Now().After(deadline) {
			stop()
			t.Fatalf("relay produced %d records, want %d", len(prod.records()), n)
		}
		time.Sleep(20 * time.Millisecond) // polling interval, not synchronisation
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("relay: %v", err)
	}
	return prod.records()
}

func diffRecords(a, b *kgo.Record) string {
	switch {
	case a.Topic != b.Topic:
		return fmt.Sprintf("topic %q vs %q", a.Topic, b.Topic)
	case !bytes.Equal(a.Key, b.Key):
		return fmt.Sprintf("key %q vs %q", a.Key, b.Key)
	case !bytes.Equal(a.Value, b.Value):
		return fmt.Sprintf("value %q vs %q", a.Value, b.Value)
	case len(a.Headers) != len(b.Headers):
		return fmt.Sprintf("headers %v vs %v", a.Headers, b.Headers)
	}
	for i := range a.Headers {
		if a.Headers[i].Key != b.Headers[i].Key || !bytes.Equal(a.Headers[i].Value, b.Headers[i].Value) {
			return fmt.Sprintf("header %d: %s=%q vs %s=%q", i, a.Headers[i].Key, a.Headers[i].Value, b.Headers[i].Key, b.Headers[i].Value)
		}
	}
	return ""
}
