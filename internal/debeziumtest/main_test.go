package debeziumtest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/pgtest"
)

// One Postgres and one broker for the package's tests: each test works in
// its own database, slot, publication and topic.
var (
	// Debezium speaks pgoutput protocol 1: with pgtest's 64kB its
	// walsender would spill nearly every transaction; give it the default.
	sharedPG    = pgtest.Shared{Options: pgtest.Options{Settings: map[string]string{"logical_decoding_work_mem": pgtest.ServerDefault}}}
	sharedKafka kafkatest.Shared
)

func TestMain(m *testing.M) {
	code := m.Run()
	_ = sharedKafka.Close()
	_ = sharedPG.Close()
	os.Exit(code)
}

// canonicalOutbox is the outbox table of Debezium's Outbox Event Router
// documentation, with the router's default column names.
const canonicalOutbox = `
CREATE TABLE public.outbox (
    id            uuid         PRIMARY KEY,
    aggregatetype varchar(255) NOT NULL,
    aggregateid   varchar(255) NOT NULL,
    type          varchar(255) NOT NULL,
    payload       jsonb
)`

// fixture is a test's database with the canonical outbox, a session on it,
// the shared broker, and Options for a connector of the test's own.
type fixture struct {
	ctx    context.Context
	conn   *pgx.Conn
	broker *kafkatest.Broker
	db     string
	opts   debeziumtest.Options
}

// newFixture prepares a fixture whose connector, slot and publication are
// named name. Offsets are flushed only by a graceful stop: the periodic
// flush is ten minutes away.
func newFixture(t *testing.T, name string) *fixture {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	t.Cleanup(cancel)
	srv := sharedPG.Server(t)
	f := &fixture{ctx: ctx, broker: sharedKafka.Broker(t), db: pgtest.NewDatabase(t, srv)}
	var err error
	if f.conn, err = pgx.Connect(ctx, srv.DSN(f.db)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.conn.Close(context.Background()) })
	if _, err := f.conn.Exec(ctx, canonicalOutbox); err != nil {
		t.Fatal(err)
	}
	f.opts = debeziumtest.Options{
		Bootstrap: f.broker.Addr(),
		PG:        debeziumtest.PG{Port: srv.Port(), DBName: f.db},
		Name:      name,
		Connector: map[string]string{"slot.name": name, "publication.name": name},
		Worker:    map[string]string{"offset.flush.interval.ms": "600000"},
	}
	return f
}

// consume returns a client reading topic from its start.
func (f *fixture) consume(t *testing.T, topic string) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(f.broker.Addrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// poll returns the next n records of cl, failing t at the fixture's
// deadline or on a fetch error that is not a retryable one (topic
// auto-creation races the first fetch).
func (f *fixture) poll(t *testing.T, cl *kgo.Client, n int) []*kgo.Record {
	t.Helper()
	var got []*kgo.Record
	for len(got) < n {
		fetches := cl.PollFetches(f.ctx)
		if f.ctx.Err() != nil {
			t.Fatalf("consumed %d of %d records before the deadline", len(got), n)
		}
		for _, e := range fetches.Errors() {
			if e.Err != nil && !kgo.IsRetryableBrokerErr(e.Err) {
				t.Fatalf("fetch %s/%d: %v", e.Topic, e.Partition, e.Err)
			}
		}
		got = append(got, fetches.Records()...)
	}
	return got
}

func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}
