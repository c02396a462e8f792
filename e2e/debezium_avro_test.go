package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/internal/registrytest"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/schemareg"
)

// apicurioPom is the Maven project of Connect, Debezium and Apicurio's
// converter, relative to e2e/.
var apicurioPom = filepath.Join("debezium", "apicurio", "pom.xml")

const apicurioConverter = "io.apicurio.registry.utils.converter.AvroConverter"

// avroRows exercise every inference rule: nested objects, arrays of
// records of one shape (optional items) and of two (merged, required
// items), arrays of arrays of records (unnamed records), ints that need
// int64, floats, nulls, empty arrays and objects, a shape met twice.
var avroRows = []struct{ id, aggType, payload string }{
	{"00000000-0000-4000-8000-00000000a001", "order", `{"n": 1, "item": "book", "price": 12.5, "tags": ["a", "b"], "nested": {"ok": true, "none": null}}`},
	{"00000000-0000-4000-8000-00000000a002", "order", `{"n": 2, "item": "pen", "price": 1.25, "tags": ["c"], "nested": {"ok": false}}`},
	{"00000000-0000-4000-8000-00000000a003", "order", `{"big": 3000000000, "neg": -1, "edge": -2147483649, "lines": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 2}, null], "empty": [], "obj": {}, "x": 1e3, "y": 0.1, "w": 1e-7}`},
	{"00000000-0000-4000-8000-00000000a004", "order", `{"grid": [[{"x": 1}], [{"x": 2}], null], "deep": {"a": {"b": {"c": [1, null, 3]}}}}`},
	{"00000000-0000-4000-8000-00000000a005", "order", `{"lines": [{"sku": "a", "note": null}, {"sku": "b", "note": "x"}], "s": "Zoë \"Q\"\n\t\u0001 😀"}`},
	// Unnamed records: two equal (the second a reference), another, one
	// holding a record without a namespace inside theirs.
	{"00000000-0000-4000-8000-00000000a006", "order", `{"m": [[{"x": 1}]], "k": [[{"x": 2}]], "p": [[{"y": "a"}]], "r": [[{"o": {"z": true}}]]}`},
}

// avroJSONRows are json (not jsonb) payloads, kept as written: repeated
// keys (the last value, in the first place), escapes, number forms and the
// int32 and int64 bounds.
var avroJSONRows = []struct{ id, aggType, payload string }{
	{"00000000-0000-4000-8000-00000000c001", "json", `{ "b" : 1, "a": [ 1 , 2 ], "b": "again", "e": "\ud83d\ude00 😀 \u00e9" }`},
	{"00000000-0000-4000-8000-00000000c002", "json", `{"n": 1.0, "m": -0, "k": 1E+2, "big": 9223372036854775807, "small": -9223372036854775808, ` +
		`"i": 2147483647, "j": 2147483648, "neg": -2147483648, "negl": -2147483649, "f": 1.7976931348623157e308, "tiny": 5e-324}`},
}

// avroBadRows are payloads Debezium's expansion fails on: it logs the
// failure and sends the payload as an Avro string (under a string schema of
// its own subject); walbox dead-letters them naming the reason.
var avroBadRows = []struct{ id, table, payload, reason string }{
	{"00000000-0000-4000-8000-00000000a0ff", "public.ob_avro", `{"mixed": [1, "x"]}`, "Field is not a homogenous array"},
	{"00000000-0000-4000-8000-00000000c0ff", "public.ob_avrojson", ` {"leading": "space"}`, "starting with '{'"},
}

// TestDebeziumInferredAvroMatches runs real Debezium 3.6.1 (Connect
// standalone, the Postgres connector, the Outbox EventRouter with
// table.expand.json.payload=true) with Apicurio's AvroConverter 2.6.13
// (as-confluent, auto-register) and walbox with --value-format avro
// --value-schema-source inferred on the same rows, both against one real
// Apicurio 2.4.2 registry under their own subjects, and compares the value
// bytes after the schema id, the keys, and the schemas each registered.
// Then it decodes walbox's records, inferred and registered-contract, with
// the converter's toConnectData (WalboxAvroDecode.java, the code
// docs/schema-registry.md shows) and checks they give the payloads back.
func TestDebeziumInferredAvroMatches(t *testing.T) {
	fulltest.Require(t, "Debezium with Apicurio's AvroConverter against a real registry, runs Kafka Connect")
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	srv := pgtest.Start(t, func(o *pgtest.Options) {
		o.Settings = map[string]string{"logical_decoding_work_mem": pgtest.ServerDefault}
	})
	broker := kafkatest.Start(t)
	registry := registrytest.Start(t)
	native := strings.TrimSuffix(registry.URL, "/apis/ccompat/v7") + "/apis/registry/v2"
	db := pgtest.NewDatabase(t, srv)
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, table := range []string{"public.ob_avro", "public.ob_avroreg", "public.ob_avrojson"} {
		columns := canonicalColumns
		if table == "public.ob_avrojson" {
			columns = strings.Replace(columns, "payload jsonb", "payload json", 1)
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE "+table+" ("+columns+")"); err != nil {
			t.Fatal(err)
		}
	}
	topics := []string{"dbz.avro.order", "wb.avro.order", "dbz.avro.json", "wb.avro.json", "dbz.avro.bad", "wb.avro.dlq", "wbreg.order"}
	adm, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopics(ctx, 1, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}

	pom, err := filepath.Abs(apicurioPom)
	if err != nil {
		t.Fatal(err)
	}
	pg := debeziumtest.PG{Port: srv.Port(), DBName: db}
	connectStart := time.Now()
	debeziumtest.StartT(t, debeziumtest.Options{
		Name: "dbz-avro", Bootstrap: broker.Addr(), PG: pg, Pom: pom,
		Connector: map[string]string{
			"table.include.list": "public.ob_avro,public.ob_avrojson",
			"slot.name":          "dbz_avro",
			"publication.name":   "dbz_avro",
			"topic.prefix":       dbzLogicalName,
			"transforms.outbox.route.topic.replacement":   "dbz.avro.${routedByValue}",
			"transforms.outbox.table.expand.json.payload": "true",
			"value.converter":                                   apicurioConverter,
			"value.converter.apicurio.registry.url":             native,
			"value.converter.apicurio.registry.auto-register":   "true",
			"value.converter.apicurio.registry.as-confluent":    "true",
			"value.converter.apicurio.registry.use-id":          "contentId",
			"value.converter.apicurio.registry.headers.enabled": "false",
		},
	})
	t.Logf("Connect with Debezium and the Apicurio converter running after %s (classpath resolution included)", time.Since(connectStart).Round(time.Millisecond))

	walbox := func(table, slot, topic string, extra ...string) *proc {
		env := []string{
			"WALBOX_PG_DSN=" + srv.DSN(db),
			"WALBOX_KAFKA_BROKERS=" + broker.Addr(),
			"WALBOX_TABLE=" + table,
			"WALBOX_SLOT=" + slot,
			"WALBOX_PUBLICATION=" + slot,
			"WALBOX_TOPIC=" + topic,
			"WALBOX_COLUMN_AGGREGATE_TYPE=aggregatetype",
			"WALBOX_COLUMN_AGGREGATE_ID=aggregateid",
			"WALBOX_COLUMN_EVENT_TYPE=type",
			"WALBOX_VALUE_FORMAT=avro",
			"WALBOX_SCHEMA_REGISTRY_URL=" + registry.URL,
			"WALBOX_METRICS_ADDR=127.0.0.1:0",
			"WALBOX_STATUS_INTERVAL=200ms",
		}
		p := startWalbox(t, append(env, extra...))
		waitSlotActive(ctx, t, conn, slot, p)
		return p
	}
	walbox("public.ob_avro,public.ob_avrojson", "wb_avro", "wb.avro.{aggregate_type}",
		"WALBOX_VALUE_SCHEMA_SOURCE=inferred", "WALBOX_INVALID_ROWS=dead-letter", "WALBOX_DEAD_LETTER_TOPIC=wb.avro.dlq")

	// The registered-contract mode, for the Java consumer: a schema
	// registered beforehand.
	const regSchema = `{"type":"record","name":"Order","namespace":"shop","fields":[` +
		`{"name":"n","type":"int"},{"name":"status","type":{"type":"enum","name":"Status","symbols":["NEW","PAID"]}},` +
		`{"name":"lines","type":{"type":"array","items":{"type":"record","name":"Line","fields":[{"name":"sku","type":"string"},{"name":"qty","type":"long"}]}}},` +
		`{"name":"note","type":["null","string"],"default":null}]}`
	admin, err := sr.NewClient(sr.URLs(registry.URL))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.CreateSchema(ctx, "wbreg.order-value", sr.Schema{Schema: regSchema}); err != nil {
		t.Fatal(err)
	}
	walbox("public.ob_avroreg", "wb_avroreg", "wbreg.{aggregate_type}")
	regRows := []string{
		`{"n": 1, "status": "NEW", "lines": [{"sku": "a", "qty": 3}], "note": null}`,
		`{"n": 2, "status": "PAID", "lines": [], "note": "gift"}`,
	}

	insert := func(table, id, aggType, payload string) {
		t.Helper()
		cast := "jsonb"
		if table == "public.ob_avrojson" {
			cast = "json"
		}
		if _, err := conn.Exec(ctx, "INSERT INTO "+table+" (id, aggregatetype, aggregateid, type, payload) VALUES ($1, $2, $3, 'Created', $4::"+cast+")",
			id, aggType, aggType+"-1", payload); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range avroRows {
		insert("public.ob_avro", r.id, r.aggType, r.payload)
	}
	for _, r := range avroJSONRows {
		insert("public.ob_avrojson", r.id, r.aggType, r.payload)
	}
	for _, r := range avroBadRows {
		insert(r.table, r.id, "bad", r.payload)
	}
	for i, p := range regRows {
		insert("public.ob_avroreg", fmt.Sprintf("00000000-0000-4000-8000-00000000b%03d", i), "order", p)
	}

	got := consumeAll(ctx, t, broker.Addrs(), topics, 2*(len(avroRows)+len(avroJSONRows)+len(avroBadRows))+len(regRows))
	byTopic := map[string]map[string]*kgo.Record{}
	for _, r := range got {
		id := dbzHeader(r, "id")
		if strings.HasPrefix(r.Topic, "wb") {
			id = dbzHeader(r, router.HeaderEventID)
		}
		if byTopic[r.Topic] == nil {
			byTopic[r.Topic] = map[string]*kgo.Record{}
		}
		byTopic[r.Topic][id] = r
	}

	// The records: the same bytes after the schema id, the same keys.
	idsEqual := 0
	for _, row := range append(slices.Clip(avroRows), avroJSONRows...) {
		d, w := byTopic["dbz.avro."+row.aggType][row.id], byTopic["wb.avro."+row.aggType][row.id]
		if d == nil || w == nil {
			t.Errorf("row %s: Debezium record %v, walbox record %v", row.id, d != nil, w != nil)
			continue
		}
		did, dbody, derr := schemareg.ParseHeader(d.Value)
		wid, wbody, werr := schemareg.ParseHeader(w.Value)
		if derr != nil || werr != nil {
			t.Errorf("row %s: wire format: Debezium %v, walbox %v", row.id, derr, werr)
			continue
		}
		if !bytes.Equal(dbody, wbody) {
			t.Errorf("row %s: the Avro bodies differ:\n  Debezium % x\n  walbox   % x", row.id, dbody, wbody)
		}
		if !bytes.Equal(d.Key, w.Key) {
			t.Errorf("row %s: keys differ: Debezium %q, walbox %q", row.id, d.Key, w.Key)
		}
		ds, err1 := admin.SchemaByID(ctx, int(did))
		ws, err2 := admin.SchemaByID(ctx, int(wid))
		if err1 != nil || err2 != nil {
			t.Errorf("row %s: schema ids %d, %d: %v, %v", row.id, did, wid, err1, err2)
			continue
		}
		if ds.Schema != ws.Schema {
			t.Errorf("row %s: the registered schemas differ:\n  Debezium %s\n  walbox   %s", row.id, ds.Schema, ws.Schema)
		}
		if did == wid {
			idsEqual++
		}
	}
	t.Logf("%d rows compared; the schema ids were equal in %d (the registry stores one content for both)", len(avroRows)+len(avroJSONRows), idsEqual)

	// Each side registered one version per distinct shape, the same ones.
	for subject, want := range map[string]int{"order": len(avroRows) - 1, "json": len(avroJSONRows)} {
		dv, err1 := admin.Schemas(ctx, "dbz.avro."+subject+"-value")
		wv, err2 := admin.Schemas(ctx, "wb.avro."+subject+"-value")
		if err1 != nil || err2 != nil {
			t.Fatalf("subject versions: %v, %v", err1, err2)
		}
		if len(dv) != len(wv) || len(wv) != want {
			t.Errorf("%s: versions: Debezium %d, walbox %d, want %d (one per distinct shape)", subject, len(dv), len(wv), want)
		}
		for i := range min(len(dv), len(wv)) {
			if dv[i].Schema.Schema != wv[i].Schema.Schema {
				t.Errorf("%s: version %d differs:\n  Debezium %s\n  walbox   %s", subject, i+1, dv[i].Schema.Schema, wv[i].Schema.Schema)
			}
		}
	}

	// Where Debezium's expansion fails it sends the payload as a string;
	// walbox dead-letters the row with the reason.
	for _, bad := range avroBadRows {
		if d := byTopic["dbz.avro.bad"][bad.id]; d == nil {
			t.Errorf("Debezium sent no record for %s", bad.payload)
		} else if s, err := admin.SchemaByID(ctx, int(must(schemareg.ParseHeader(d.Value)))); err == nil {
			t.Logf("Debezium sent %s with the schema %s", bad.payload, s.Schema)
		}
		dl := byTopic["wb.avro.dlq"][bad.id]
		if dl == nil {
			t.Errorf("walbox dead-lettered nothing for %s", bad.payload)
		} else if reason := dbzHeader(dl, router.HeaderError); !strings.Contains(reason, bad.reason) {
			t.Errorf("dead-letter reason %q, want %q", reason, bad.reason)
		}
	}

	// The Java consumer: Apicurio's converter decodes walbox's records,
	// inferred and registered, to the payloads.
	type decodeCase struct{ topic, payload string }
	var cases []decodeCase
	var lines strings.Builder
	for _, row := range avroRows {
		if w := byTopic["wb.avro.order"][row.id]; w != nil {
			cases = append(cases, decodeCase{w.Topic, row.payload})
			fmt.Fprintf(&lines, "%s %s\n", w.Topic, hex.EncodeToString(w.Value))
		}
	}
	for i, p := range regRows {
		if w := byTopic["wbreg.order"][fmt.Sprintf("00000000-0000-4000-8000-00000000b%03d", i)]; w != nil {
			cases = append(cases, decodeCase{w.Topic, p})
			fmt.Fprintf(&lines, "%s %s\n", w.Topic, hex.EncodeToString(w.Value))
		} else {
			t.Errorf("no walbox record for registered row %d", i)
		}
	}
	javaStart := time.Now()
	out := runJavaDecoder(ctx, t, pom, native, lines.String())
	t.Logf("the Java consumer decoded %d records in %s (JVM start and compilation included)", len(cases), time.Since(javaStart).Round(time.Millisecond))
	if len(out) != len(cases) {
		t.Fatalf("the Java consumer printed %d lines for %d records:\n%s", len(out), len(cases), strings.Join(out, "\n"))
	}
	for i, c := range cases {
		if strings.HasPrefix(out[i], "ERROR") {
			t.Errorf("record %d (%s): %s", i, c.topic, out[i])
			continue
		}
		if !sameJSONIgnoringNulls(t, out[i], c.payload) {
			t.Errorf("record %d (%s): toConnectData gave %s, want the payload %s", i, c.topic, out[i], c.payload)
		}
	}
	t.Logf("test duration %s", time.Since(start).Round(time.Millisecond))
}

// TestApicurioPomRecordsDebeziumPom: e2e/debezium/apicurio/pom.xml
// inherits e2e/debezium/pom.xml's jars, but its cached classpath is keyed by
// its own hash; it records the parent's hash, so that a change of the
// parent (another Debezium or Kafka version) changes the child too.
func TestApicurioPomRecordsDebeziumPom(t *testing.T) {
	parent, err := os.ReadFile(filepath.Join("debezium", "pom.xml"))
	if err != nil {
		t.Fatal(err)
	}
	child, err := os.ReadFile(apicurioPom)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(parent)
	want := "parent-sha256: " + hex.EncodeToString(sum[:])
	if !bytes.Contains(child, []byte(want)) {
		t.Errorf("%s does not record e2e/debezium/pom.xml's hash; update its line to %q", apicurioPom, want)
	}
}

func must[T any](v T, _ []byte, err error) T {
	if err != nil {
		var zero T
		return zero
	}
	return v
}

// waitSlotActive waits until walbox streams from its slot, so that rows
// inserted after are in it.
func waitSlotActive(ctx context.Context, t *testing.T, conn *pgx.Conn, slot string, p *proc) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		var active bool
		err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		if err == nil && active {
			return
		}
		select {
		case <-p.done:
			t.Fatalf("walbox exited: %v\n%s", p.err, p.stderr.Tail(4000))
		case <-time.After(100 * time.Millisecond): // polling interval
		}
	}
	t.Fatalf("walbox's slot %s not active in 2 minutes:\n%s", slot, p.stderr.Tail(4000))
}

// runJavaDecoder runs WalboxAvroDecode.java with the converter's classpath
// and returns its output lines.
func runJavaDecoder(ctx context.Context, t *testing.T, pom, registryURL, input string) []string {
	t.Helper()
	kopts := kafkatest.Options{}
	java, err := kafkatest.FindJava(kopts)
	if err != nil {
		t.Fatal(err)
	}
	jars, _, err := kafkatest.ResolveClasspath(ctx, kopts, pom, "debezium")
	if err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(filepath.Dir(pom), "WalboxAvroDecode.java")
	cmd := exec.CommandContext(ctx, java, append(kafkatest.JVMDefaults(),
		"-cp", strings.Join(jars, string(os.PathListSeparator)), src, registryURL)...)
	cmd.Stdin = strings.NewReader(input)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var lines []string
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("java WalboxAvroDecode.java: %v\n%s", err, tailString(stderr.String(), 4000))
	}
	return lines
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// sameJSONIgnoringNulls compares two JSON documents as values, with null
// members and empty arrays dropped (Debezium's inference drops them, and
// Connect's JsonConverter writes every field of a struct).
func sameJSONIgnoringNulls(t *testing.T, a, b string) bool {
	t.Helper()
	norm := func(s string) string {
		var v any
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("%v: %s", err, s)
		}
		out, _ := json.Marshal(dropNulls(v))
		return string(out)
	}
	return norm(a) == norm(b)
}

func dropNulls(v any) any {
	switch v := v.(type) {
	case map[string]any:
		out := map[string]any{}
		for k, e := range v {
			if e == nil {
				continue
			}
			if arr, ok := e.([]any); ok && len(arr) == 0 {
				continue
			}
			out[k] = dropNulls(e)
		}
		return out
	case []any:
		out := make([]any, len(v))
		for i, e := range v {
			out[i] = dropNulls(e)
		}
		return out
	}
	return v
}
