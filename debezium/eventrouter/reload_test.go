package eventrouter

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/decoder"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/router"
)

// TestReloadColumnsOnRelation: Debezium refreshes a table's schema from the
// catalog on every Relation message, so an ALTER TABLE ... SET NOT NULL
// (or SET DEFAULT) while it runs changes the records' schemas from then on.
// walbox used to read the column facts once at start and kept writing the
// old schema. Now each new Relation reloads them (the same Relation does
// not), and a failed reload fails the row with the error, not as an
// invalid row (which --invalid-rows=dead-letter would divert).
func TestReloadColumnsOnRelation(t *testing.T) {
	notNull := false
	calls := 0
	var fail error
	cfg := testConfig(func(c *Config) {
		c.KeyConverter = ConverterConfig{Kind: JSONConverter, SchemasEnable: true}
		c.ReloadColumns = func(table string) ([]ColumnInfo, error) {
			calls++
			if table != "public.outbox" {
				t.Errorf("reload of %q", table)
			}
			if fail != nil {
				return nil, fail
			}
			return []ColumnInfo{{Name: "id", NotNull: true}, {Name: "aggregatetype", NotNull: true},
				{Name: "aggregateid", NotNull: notNull}, {Name: "type", NotNull: true}, {Name: "payload"}}, nil
		}
	})
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	keyOptional := func(ins any) bool {
		t.Helper()
		got, err := r.Route(ins.(*decoder.Insert))
		if err != nil {
			t.Fatal(err)
		}
		var k struct{ Schema struct{ Optional bool } }
		if err := json.Unmarshal(got.Record.Key, &k); err != nil {
			t.Fatalf("key %s: %v", got.Record.Key, err)
		}
		return k.Schema.Optional
	}
	first := insert(canonical(str("{}")))
	if !keyOptional(first) || calls != 1 {
		t.Fatalf("nullable aggregateid: key optional false or %d reloads, want true and 1", calls)
	}
	notNull = true // ALTER TABLE outbox ALTER aggregateid SET NOT NULL
	same := *first // another row under the same Relation message
	if !keyOptional(&same) || calls != 1 {
		t.Fatalf("same Relation: %d reloads, want 1 and the old facts", calls)
	}
	if keyOptional(insert(canonical(str("{}")))) || calls != 2 {
		t.Fatalf("new Relation after SET NOT NULL: key still optional, or %d reloads (want 2)", calls)
	}
	fail = errors.New("connection lost")
	_, err = r.Route(insert(canonical(str("{}"))))
	var invalid *router.InvalidRowError
	if !errors.Is(err, fail) || errors.As(err, &invalid) {
		t.Fatalf("failed reload: Route = %v, want the loader's error and not an invalid row", err)
	}
}

// TestCatalogLoader reads the facts again after an ALTER TABLE, and opens
// a new connection after its connection was lost.
func TestCatalogLoader(t *testing.T) {
	srv := pgtest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, `CREATE TABLE public.outbox (id uuid PRIMARY KEY, aggregateid text, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	cc, err := pgx.ParseConfig(srv.DSN("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	cc.RuntimeParams["application_name"] = "catalog_loader_test"
	l := NewCatalogLoader(cc, 10*time.Second)
	defer l.Close()
	facts := func() map[string]ColumnInfo {
		t.Helper()
		cols, err := l.Load("public.outbox")
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]ColumnInfo{}
		for _, c := range cols {
			m[c.Name] = c
		}
		return m
	}
	if f := facts(); f["aggregateid"].NotNull || f["aggregateid"].Default != "" {
		t.Fatalf("before ALTER: %+v", f["aggregateid"])
	}
	if _, err := conn.Exec(ctx, `ALTER TABLE public.outbox ALTER aggregateid SET NOT NULL, ALTER aggregateid SET DEFAULT 'none'`); err != nil {
		t.Fatal(err)
	}
	if f := facts(); !f["aggregateid"].NotNull || f["aggregateid"].Default != "'none'::text" {
		t.Fatalf("after ALTER: %+v", f["aggregateid"])
	}
	if _, err := conn.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'catalog_loader_test'`); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Load("public.outbox"); err == nil {
		t.Log("the terminated connection was not noticed by the first Load") // the server may close it before the query
	}
	if f := facts(); !f["aggregateid"].NotNull {
		t.Fatalf("after a lost connection: %+v", f["aggregateid"])
	}
}
