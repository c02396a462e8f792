package pipeline_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// ackingProducer acknowledges every record at once and keeps it.
type ackingProducer struct {
	mu   sync.Mutex
	recs []*kgo.Record
}

func (p *ackingProducer) Produce(_ context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.mu.Lock()
	p.recs = append(p.recs, r)
	p.mu.Unlock()
	promise(r, nil)
}

func (p *ackingProducer) Flush(context.Context) error { return nil }

// TestReplayBoundsAreCommitLSNsInclusive writes five transactions, learns
// their exact commit LSNs (the final_lsn of pgoutput's Begin, read with
// pg_logical_slot_peek_binary_changes from a helper slot), and replays with
// bounds at, just inside and just outside them: both ends are inclusive
// and compare with the commit LSN. Progress is reported while it runs, and
// every record carries its row's commit time as its timestamp.
//
// It runs on every installed version (temporary slot copies, pgoutput
// proto_version 1 and the walsender differ between them).
func TestReplayBoundsAreCommitLSNsInclusive(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		testReplayBounds(t, pgtest.WithBinDir(v.BinDir))
	})
}

func testReplayBounds(t *testing.T, opts ...func(*pgtest.Options)) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv := pgtest.Start(t, append(opts, pgtest.WithSetting("track_commit_timestamp", "on"))...)
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	setupReplaySource(ctx, t, conn)
	gen := outboxtest.NewGenerator(3, 4)
	var txns [][]outboxtest.Event
	for range 5 {
		evs := gen.Batch(3)
		if err := outboxtest.WriteTx(ctx, conn, evs); err != nil {
			t.Fatal(err)
		}
		txns = append(txns, evs)
	}
	commits := commitLSNs(ctx, t, conn)
	if len(commits) != 5 {
		t.Fatalf("found %d commits, want 5", len(commits))
	}
	// A replayed record carries its row's commit time, as the live one.
	committed := map[string]time.Time{}
	rows, err := conn.Query(ctx, `SELECT id::text, pg_xact_commit_timestamp(xmin) FROM public.outbox`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id string
		var at time.Time
		if err := rows.Scan(&id, &at); err != nil {
			t.Fatal(err)
		}
		committed[id] = at
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	rt, err := router.New(router.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(which ...int) []string {
		var out []string
		for _, i := range which {
			for _, ev := range txns[i] {
				out = append(out, ev.ID)
			}
		}
		return out
	}
	for _, tt := range []struct {
		name string
		rg   pipeline.Range
		want []string
	}{
		{"at the commit LSNs of 1 and 3", pipeline.Range{FromLSN: commits[1], ToLSN: commits[3]}, ids(1, 2, 3)},
		{"one byte inside both", pipeline.Range{FromLSN: commits[1] + 1, ToLSN: commits[3] - 1}, ids(2)},
		{"one byte outside both", pipeline.Range{FromLSN: commits[1] - 1, ToLSN: commits[3] + 1}, ids(1, 2, 3)},
		{"exactly one transaction", pipeline.Range{FromLSN: commits[4], ToLSN: commits[4]}, ids(4)},
		{"open end: up to the position at start", pipeline.Range{FromLSN: commits[2]}, ids(2, 3, 4)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := &ackingProducer{}
			progressed := 0
			res, err := pipeline.Replay(ctx, pipeline.ReplayConfig{
				ConnString: srv.DSN("postgres"), Publication: "walbox", Slot: "walbox_replay", Tables: []string{"public.outbox"},
				Range: tt.rg, From: tt.rg.FromLSN.String(), StatusInterval: 50 * time.Millisecond,
				Progress: func(pipeline.ReplayProgress) { progressed++ }, ProgressInterval: time.Nanosecond,
			}, p, rt, testLogger(t))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range p.recs {
				var id, replay string
				for _, h := range r.Headers {
					switch h.Key {
					case "event_id":
						id = string(h.Value)
					case pipeline.ReplayHeader:
						replay = string(h.Value)
					}
				}
				if replay != "true" {
					t.Errorf("record %s without %s: true", id, pipeline.ReplayHeader)
				}
				if !r.Timestamp.Equal(committed[id]) {
					t.Errorf("record %s has timestamp %v, want its commit time %v", id, r.Timestamp, committed[id])
				}
				got = append(got, id)
			}
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("replayed %v\nwant     %v", got, tt.want)
			}
			if res.Events() != len(tt.want) || res.Transactions != len(tt.want)/3 {
				t.Errorf("result: %d events in %d transactions, want %d in %d", res.Events(), res.Transactions, len(tt.want), len(tt.want)/3)
			}
			if progressed == 0 {
				t.Error("no progress reported")
			}
		})
	}
	// Refusals before anything is copied.
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('td', 'test_decoding')`); err != nil {
		t.Fatal(err)
	}
	for slot, want := range map[string]error{"td": slotctl.ErrSlotMismatch, "nosuch": pipeline.ErrNoTrailingSlot} {
		_, err := pipeline.Replay(ctx, pipeline.ReplayConfig{ConnString: srv.DSN("postgres"), Publication: "walbox", Slot: slot,
			Range: pipeline.Range{FromLSN: 1}, DryRun: true}, nil, rt, testLogger(t))
		if !errors.Is(err, want) {
			t.Errorf("replay from slot %s: %v, want %v", slot, err, want)
		}
	}
	var temporary int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE temporary`).Scan(&temporary); err != nil || temporary != 0 {
		t.Errorf("%d temporary slots left (%v)", temporary, err)
	}
}

// commitLSNs returns the commit LSN of every transaction the slot "peek"
// would send, in order, without consuming them.
func commitLSNs(ctx context.Context, t *testing.T, conn *pgx.Conn) []pglogrepl.LSN {
	t.Helper()
	rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes('peek', NULL, NULL,
		'proto_version', '1', 'publication_names', 'walbox')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	dec := decoder.New()
	var out []pglogrepl.LSN
	for rows.Next() {
		var (
			lsnText string
			data    []byte
		)
		if err := rows.Scan(&lsnText, &data); err != nil {
			t.Fatal(err)
		}
		lsn, _ := pglogrepl.ParseLSN(lsnText)
		msg, err := dec.Decode(lsn, data)
		if err != nil {
			t.Fatal(err)
		}
		if b, ok := msg.(*decoder.Begin); ok {
			out = append(out, b.CommitLSN)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// setupReplaySource prepares a replay test's server: the outbox table, its
// publication, the live slot walbox_replay that replay copies, and the
// independent slot peek the tests read the server's own view from.
func setupReplaySource(ctx context.Context, t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	cfg := slotctl.Config{Table: "public.outbox", Slot: "walbox_replay", Publication: "walbox", CreateMissing: true}
	if err := slotctl.EnsurePublication(ctx, conn, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := slotctl.EnsureSlot(ctx, conn, cfg); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_create_logical_replication_slot('peek', 'pgoutput')`); err != nil {
		t.Fatal(err)
	}
}
