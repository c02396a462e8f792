package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/debezium"
	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
)

// walbox migrate-from-debezium against real Postgres and Kafka, from a
// stored offset written as Debezium's Postgres connector writes it (not
// from a Debezium run: stopping a real task at a chosen row of a COPY is
// not something a test can time). Debezium's slot holds, after the
// position it confirmed, a COPY of 50 rows (heap_multi_insert records, one
// per heap page: the first page's rows, 33 here, have the same LSN), a
// transaction with one insert and a last one. Each case stores another offset and checks exactly which events
// walbox sends: none the offset covers, every one it does not.
//
// Before, walbox took every insert of the offset's transaction at or
// before its lsn as sent: it sent none of the 40 COPY rows Debezium 3.7
// had not sent (lsn_events_processed 10), and skipped the only event of a
// transaction whose offset was stored at its BEGIN.
func TestDebeziumTakeoverOffsetFields(t *testing.T) {
	// The short run has the same plans on real Postgres
	// (debezium.TestPlanTakeoverOffsetFields) and the skipping
	// (TestSentSkipperCopy); this adds the binary and Kafka (about 20 s).
	fulltest.Require(t, "takeover from stored Debezium offsets inside a COPY and at a BEGIN, runs walbox and a broker")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	pg := pgtest.Start(t)
	broker := kafkatest.Start(t)

	tests := []struct {
		name string
		// offset returns the stored offset and the slot's confirmed
		// position, from the decoded transactions.
		offset func(w takeoverWAL) (value string, confirmed pglogrepl.LSN)
		// want returns the ids walbox must send.
		want func(w takeoverWAL) []string
	}{
		{
			name: "copy",
			offset: func(w takeoverWAL) (string, pglogrepl.LSN) {
				x := w.copy.lsns[0]
				return fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"INSERT","lsn_events_processed":10}`,
					x, x, w.first.end, w.copy.xid), w.first.end
			},
			// The COPY opens its transaction, so its BEGIN shares the
			// rows' LSN and lsn_events_processed 10 may count it (a
			// Debezium that restarted inside the COPY does): the 10th
			// row is sent again.
			want: func(w takeoverWAL) []string { return concat(w.copy.ids[9:], w.one.ids, w.last.ids) },
		},
		{
			name: "copy36",
			offset: func(w takeoverWAL) (string, pglogrepl.LSN) {
				x := w.copy.lsns[0]
				return fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"INSERT"}`,
					x, x, w.first.end, w.copy.xid), w.first.end
			},
			want: func(w takeoverWAL) []string { return concat(w.copy.ids[1:], w.one.ids, w.last.ids) },
		},
		{
			name: "begin",
			offset: func(w takeoverWAL) (string, pglogrepl.LSN) {
				return fmt.Sprintf(`{"lsn":%d,"lsn_proc":%d,"lsn_commit":%d,"txId":%d,"ts_usec":1,"messageType":"BEGIN"}`,
					w.one.lsns[0], w.copy.end, w.copy.end, w.one.xid), w.copy.end
			},
			want: func(w takeoverWAL) []string { return concat(w.one.ids, w.last.ids) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			db := pgtest.NewDatabase(t, pg)
			typ := "dbzoff" + tt.name // the topic outbox.event.<typ> is this case's
			w := writeTakeoverWAL(ctx, t, pg.DSN(db), typ)
			value, confirmed := tt.offset(w)
			if _, err := w.conn.Exec(ctx, fmt.Sprintf("SELECT pg_replication_slot_advance('%s', '%s')", debeziumtest.DefaultSlot, confirmed)); err != nil {
				t.Fatal(err)
			}
			name := "dbz-" + tt.name
			props := debeziumtest.DefaultConnectorProperties(name, debeziumtest.PG{Port: pg.Port(), DBName: db})
			props["transforms.outbox.table.field.event.key"] = "aggregate_id"
			props["transforms.outbox.route.by.field"] = "aggregate_type"
			dir := t.TempDir()
			connector, worker := filepath.Join(dir, "connector.properties"), filepath.Join(dir, "worker.properties")
			writeProps(t, connector, props)
			writeProps(t, worker, map[string]string{
				"bootstrap.servers": broker.Addr(),
				"key.converter":     debeziumtest.StringConverter,
				"value.converter":   debeziumtest.StringConverter,
			})
			topic := "connect-offsets-" + tt.name
			storeOffset(ctx, t, broker.Addrs(), topic, debezium.OffsetKey(name, debeziumtest.DefaultTopicPrefix), value)

			env := []string{
				"WALBOX_DEBEZIUM_CONFIG=" + connector, "WALBOX_DEBEZIUM_WORKER_CONFIG=" + worker,
				"WALBOX_METRICS_ADDR=", "WALBOX_LOG_FORMAT=text", "WALBOX_SPOOL_DIR=" + filepath.Join(dir, "spool"),
			}
			plan, err := runWalboxCmd(t, env, "migrate-from-debezium", "--dry-run", "--debezium-offsets-topic", topic)
			if err != nil {
				t.Fatalf("dry run: %v\n%s", err, plan)
			}
			t.Logf("offset %s\nplan:\n%s", value, plan)
			col := startCollectorPattern(ctx, t, broker.Addrs(), `outbox\.event\.`+typ)
			p := startWalboxCmd(t, env, "migrate-from-debezium", "--debezium-offsets-topic", topic)
			want := tt.want(w)
			// The last transaction commits after every other: once its
			// event is in, walbox has produced the rest (a clean stop
			// flushes them).
			last := w.last.ids[0]
			waitUntil(ctx, t, 2*time.Minute, "walbox to send the last transaction's event "+last, func() bool {
				for _, r := range col.snapshot() {
					if r.Headers["id"] == last {
						return true
					}
				}
				return p.exited()
			})
			if code := p.stop(t, syscall.SIGTERM, time.Minute); code != 0 {
				t.Fatalf("walbox exit code %d", code)
			}
			// Everything walbox produced is below the end offsets now.
			total := int64(0)
			for _, off := range endOffsets(ctx, t, broker.Addrs())["outbox.event."+typ] {
				total += off
			}
			waitUntil(ctx, t, time.Minute, fmt.Sprintf("the %d records walbox produced", total), func() bool {
				return int64(len(col.snapshot())) >= total
			})
			var got []string
			for _, r := range col.snapshot() {
				got = append(got, r.Headers["id"])
			}
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				var lost, extra []string
				for _, id := range want {
					if !slices.Contains(got, id) {
						lost = append(lost, id)
					}
				}
				for _, id := range got {
					if !slices.Contains(want, id) {
						extra = append(extra, id)
					}
				}
				t.Errorf("walbox sent %d events, want the %d the offset does not cover, each once: %d never sent %v, %d sent that the offset covers (or twice) %v",
					len(got), len(want), len(lost), lost, len(extra), extra)
			}
		})
	}
}

// takeoverTx is one committed transaction of the outbox as the slot decodes
// it.
type takeoverTx struct {
	xid  uint32
	ids  []string
	lsns []pglogrepl.LSN
	end  pglogrepl.LSN
}

// takeoverWAL is what writeTakeoverWAL committed after Debezium's slot.
type takeoverWAL struct {
	conn                   *pgx.Conn
	first, copy, one, last takeoverTx
}

func concat(s ...[]string) []string { return slices.Concat(s...) }

// writeTakeoverWAL creates the outbox, Debezium's publication and slot,
// and commits a transaction of one insert, a COPY of 50 rows, one of one
// insert and a last one of one insert, all with aggregate type typ.
func writeTakeoverWAL(ctx context.Context, t *testing.T, dsn, typ string) takeoverWAL {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	for _, sql := range []string{
		outboxtest.DDL,
		"CREATE PUBLICATION " + debeziumtest.DefaultPublication + " FOR TABLE public.outbox",
		"SELECT pg_create_logical_replication_slot('" + debeziumtest.DefaultSlot + "', 'pgoutput')",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	g := outboxtest.NewGenerator(1, 3, typ)
	for _, n := range []int{1, 50, 1, 1} {
		// WriteTx loads more than 8 rows with COPY, ids given (a
		// volatile default would make COPY insert row by row).
		if err := outboxtest.WriteTx(ctx, conn, g.Batch(n)); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := conn.Query(ctx, `SELECT lsn::text, data FROM pg_logical_slot_peek_binary_changes($1, NULL, NULL, 'proto_version', '1', 'publication_names', $2)`,
		debeziumtest.DefaultSlot, debeziumtest.DefaultPublication)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var txs []takeoverTx
	for rows.Next() {
		var (
			l    string
			data []byte
		)
		if err := rows.Scan(&l, &data); err != nil {
			t.Fatal(err)
		}
		lsn, _ := pglogrepl.ParseLSN(l)
		msg, err := pglogrepl.Parse(data)
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pglogrepl.BeginMessage:
			txs = append(txs, takeoverTx{xid: m.Xid})
		case *pglogrepl.InsertMessage:
			tx := &txs[len(txs)-1]
			tx.ids = append(tx.ids, string(m.Tuple.Columns[0].Data))
			tx.lsns = append(tx.lsns, lsn)
		case *pglogrepl.CommitMessage:
			txs[len(txs)-1].end = m.TransactionEndLSN
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(txs) != 4 || len(txs[1].ids) != 50 {
		t.Fatalf("decoded %d transactions, want 4 with 50 rows in the second: %+v", len(txs), txs)
	}
	// heap_multi_insert writes a record per heap page it fills: the
	// first page's rows share the first LSN.
	if n := len(txs[1].lsns) - len(slices.DeleteFunc(slices.Clone(txs[1].lsns), func(l pglogrepl.LSN) bool { return l == txs[1].lsns[0] })); n < 20 {
		t.Fatalf("%d rows of the COPY at its first LSN %s, want at least 20 (one heap_multi_insert record): %v", n, txs[1].lsns[0], txs[1].lsns)
	}
	return takeoverWAL{conn: conn, first: txs[0], copy: txs[1], one: txs[2], last: txs[3]}
}

// writeProps writes a .properties file (values without characters that
// need escaping).
func writeProps(t *testing.T, path string, props map[string]string) {
	t.Helper()
	var b strings.Builder
	keys := make([]string, 0, len(props))
	for k := range props {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s\n", k, props[k])
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// storeOffset writes one offset entry to an offsets topic, as a
// distributed Connect cluster stores it.
func storeOffset(ctx context.Context, t *testing.T, brokers []string, topic string, key []byte, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic(topic), kgo.AllowAutoTopicCreation())
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctx, &kgo.Record{Key: key, Value: []byte(value)}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}
