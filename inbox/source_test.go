package inbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/inbox"
	"github.com/walbox/walbox/internal/pgtest"
)

// onTopic is record(id, offset) on another topic.
func onTopic(topic, id string, offset int64) *kgo.Record {
	rec := record(id, offset)
	rec.Topic = topic
	return rec
}

// TestSourcesKeepEqualIDsApart: a consumer of two outbox tables whose
// BIGSERIAL ids both start at 1 used to skip the second table's event 1 as
// applied: rows were keyed by (consumer, event id) only. Without
// Config.Source that is still the rule (ids must be unique across
// everything the consumer reads, as documented); with a Source the two
// events are applied once each.
func TestSourcesKeepEqualIDsApart(t *testing.T) {
	orders, payments := onTopic("orders.events", "1", 0), onTopic("payments.events", "1", 0)
	t.Run("no source", func(t *testing.T) {
		e := newEnv(t, inbox.Config{Consumer: "ledger"})
		conn := connect(t, e.dsn)
		applied, err := e.ib.ProcessBatch(ctx(t), conn, []*kgo.Record{orders, payments}, depositEach)
		if err != nil || !applied[0] || applied[1] {
			t.Fatalf("ProcessBatch = %v, %v; want only the first applied (one id space)", applied, err)
		}
	})
	t.Run("source by topic", func(t *testing.T) {
		e := newEnv(t, inbox.Config{Consumer: "ledger", Source: inbox.SourceTopic})
		conn := connect(t, e.dsn)
		applied, err := e.ib.ProcessBatch(ctx(t), conn, []*kgo.Record{orders, payments}, depositEach)
		if err != nil || !applied[0] || !applied[1] {
			t.Fatalf("ProcessBatch = %v, %v; want both applied", applied, err)
		}
		for _, rec := range []*kgo.Record{payments, orders} {
			if applied, err := e.ib.Process(ctx(t), conn, rec, deposit(1)); err != nil || applied {
				t.Fatalf("redelivery of %s: %v, %v; want not applied", rec.Topic, applied, err)
			}
		}
		if balance, calls := account(t, conn); balance != 2 || calls != 2 {
			t.Fatalf("balance %d after %d calls, want 2 after 2", balance, calls)
		}
		var sources []string
		rows, _ := conn.Query(ctx(t), `SELECT source FROM walbox_inbox ORDER BY source`)
		sources, err = pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || strings.Join(sources, ",") != "orders.events,payments.events" {
			t.Fatalf("sources %v, %v", sources, err)
		}
	})
	t.Run("source fails", func(t *testing.T) {
		errNoSource := errors.New("unknown topic")
		e := newEnv(t, inbox.Config{Consumer: "ledger", Source: func(rec *kgo.Record) (string, error) {
			if rec.Topic == "payments.events" {
				return "", errNoSource
			}
			return "orders", nil
		}})
		conn := connect(t, e.dsn)
		_, err := e.ib.ProcessBatch(ctx(t), conn, []*kgo.Record{orders, payments}, depositEach)
		if !errors.Is(err, errNoSource) || !containsAll(err.Error(), "record 2 of 2", "topic=payments.events", `event "1"`, "Config.Source") {
			t.Fatalf("ProcessBatch: %v; want the Source's error naming record 2", err)
		}
		if n := inboxRows(t, conn, "walbox_inbox", "ledger"); n != 0 {
			t.Fatalf("%d inbox rows after a refused batch, want 0", n)
		}
	})
}

// oldInsert is the statement the inbox of the previous version ran.
const oldInsert = `INSERT INTO %s (consumer, event_id, topic, kafka_partition, kafka_offset) VALUES ($1, $2, 't', 0, 0) ON CONFLICT (consumer, event_id) DO NOTHING`

// TestUpgradeAddsSource: a table created by the previous version (only
// 001_inbox.sql), holding rows its inbox wrote, is refused by this version
// with the migration to run, without applying anything; Migrate (twice)
// adds source to the key, the old rows stay applied in the default source,
// and events of another source with the same ids are applied. The previous
// version's statement then fails (it names the old key), as
// 002_inbox_source.sql says, rather than skipping anything.
func TestUpgradeAddsSource(t *testing.T) {
	for _, table := range []string{"", "App.Inbox", "App.it's"} {
		t.Run("table="+table, func(t *testing.T) {
			srv := shared.Server(t)
			dsn := srv.DSN(pgtest.NewDatabase(t, srv))
			conn := connect(t, dsn)
			if _, err := conn.Exec(ctx(t), `CREATE SCHEMA "App"; CREATE TABLE account (id text PRIMARY KEY, balance bigint NOT NULL, applied int NOT NULL DEFAULT 0);
				INSERT INTO account VALUES ('a', 0, 0)`); err != nil {
				t.Fatal(err)
			}
			plain, err := inbox.New(inbox.Config{Consumer: "billing", Table: table})
			if err != nil {
				t.Fatal(err)
			}
			bySource, err := inbox.New(inbox.Config{Consumer: "billing", Table: table, Source: inbox.SourceTopic})
			if err != nil {
				t.Fatal(err)
			}
			quoted := `"public"."walbox_inbox"`
			if table != "" {
				quoted = pgx.Identifier(strings.Split(table, ".")).Sanitize()
			}
			// The previous version's table and rows.
			v1, err := inbox.Migrations.ReadFile("migrations/001_inbox.sql")
			if err != nil {
				t.Fatal(err)
			}
			sql := strings.ReplaceAll(string(v1), "walbox_inbox_received_at_idx", `"x_received_at_idx"`)
			sql = strings.ReplaceAll(sql, "public.walbox_inbox", quoted)
			if _, err := conn.Exec(ctx(t), sql); err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Exec(ctx(t), strings.Replace(oldInsert, "%s", quoted, 1), "billing", "e-1"); err != nil {
				t.Fatal(err)
			}

			_, err = plain.Process(ctx(t), conn, record("e-2", 0), deposit(1))
			if err == nil || !strings.Contains(err.Error(), "run Migrate or inbox/migrations/002_inbox_source.sql") {
				t.Fatalf("Process on the old table: %v; want the migration named", err)
			}
			for range 2 {
				if err := plain.Migrate(ctx(t), conn); err != nil {
					t.Fatal(err)
				}
			}
			var key string
			if err := conn.QueryRow(ctx(t), `SELECT string_agg(a.attname, ',' ORDER BY k.ord)
				FROM pg_constraint c, unnest(c.conkey) WITH ORDINALITY k(attnum, ord), pg_attribute a
				WHERE c.conrelid = $1::regclass AND c.contype = 'p' AND a.attrelid = c.conrelid AND a.attnum = k.attnum`, quoted).Scan(&key); err != nil {
				t.Fatal(err)
			}
			if key != "consumer,source,event_id" {
				t.Fatalf("primary key (%s), want (consumer,source,event_id)", key)
			}
			if applied, err := plain.Process(ctx(t), conn, record("e-1", 0), deposit(1)); err != nil || applied {
				t.Fatalf("an event the old version applied: %v, %v; want not applied", applied, err)
			}
			if applied, err := bySource.Process(ctx(t), conn, record("e-1", 0), deposit(1)); err != nil || !applied {
				t.Fatalf("the same id from a named source: %v, %v; want applied", applied, err)
			}
			if _, err := conn.Exec(ctx(t), strings.Replace(oldInsert, "%s", quoted, 1), "billing", "e-3"); err == nil {
				t.Fatal("the previous version's insert succeeded on the upgraded table; 002_inbox_source.sql says it fails")
			}
			if balance, calls := account(t, conn); balance != 1 || calls != 1 {
				t.Fatalf("balance %d after %d calls, want 1 after 1", balance, calls)
			}
		})
	}
}

// TestCleanupKeepsOtherSources: Cleanup deletes a consumer's old rows by
// their whole key: an old row of one source does not take a recent row of
// another source with the same id with it (it used to match by event id
// alone).
func TestCleanupKeepsOtherSources(t *testing.T) {
	e := newEnv(t, inbox.Config{Consumer: "ledger", Source: inbox.SourceTopic})
	conn := connect(t, e.dsn)
	if _, err := e.ib.ProcessBatch(ctx(t), conn, []*kgo.Record{onTopic("orders.events", "1", 0), onTopic("payments.events", "1", 0)}, depositEach); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx(t), `UPDATE walbox_inbox SET received_at = now() - interval '2 hours' WHERE source = 'orders.events'`); err != nil {
		t.Fatal(err)
	}
	if n, err := e.ib.Cleanup(context.Background(), conn, time.Hour, 0); err != nil || n != 1 {
		t.Fatalf("Cleanup = %d, %v; want 1", n, err)
	}
	if applied, err := e.ib.Process(ctx(t), conn, onTopic("payments.events", "1", 0), deposit(1)); err != nil || applied {
		t.Fatalf("the recent row's event after cleanup: %v, %v; want not applied (its row kept)", applied, err)
	}
}
