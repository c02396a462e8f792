package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/outboxtest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/schemareg"
)

const generatorJSONSchema = `{"type": "object", "properties": {
  "aggregate_id": {"type": "string"}, "seq": {"type": "integer"},
  "amount_cents": {"type": "integer"}, "pad": {"type": "string"}},
  "required": ["aggregate_id", "seq", "amount_cents", "pad"], "additionalProperties": false}`

const generatorProto = `syntax = "proto3";
package shop;
message Event { string aggregate_id = 1; int64 seq = 2; int64 amount_cents = 3; string pad = 4; }
`

// formatCase is a value format, its schema and how a record of it decodes.
type formatCase struct {
	name   string
	typ    sr.SchemaType
	schema string
	decode func(body []byte) (generatorPayload, error)
}

var deliveryFormats = []formatCase{
	{name: "avro", typ: sr.TypeAvro, schema: generatorAvro, decode: func(b []byte) (p generatorPayload, err error) {
		err = avro.Unmarshal(avro.MustParse(generatorAvro), b, &p)
		return p, err
	}},
	{name: "json-schema", typ: sr.TypeJSON, schema: generatorJSONSchema, decode: func(b []byte) (p generatorPayload, err error) {
		err = json.Unmarshal(b, &p)
		return p, err
	}},
	{name: "protobuf", typ: sr.TypeProtobuf, schema: generatorProto, decode: decodeGeneratorProto},
}

// decodeGeneratorProto reads a shop.Event (after its message index).
func decodeGeneratorProto(body []byte) (p generatorPayload, err error) {
	index, b, err := schemareg.ParseIndex(body)
	if err != nil {
		return p, err
	}
	if len(index) != 1 || index[0] != 0 {
		return p, fmt.Errorf("message index %v, want [0]", index)
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return p, protowire.ParseError(n)
		}
		b = b[n:]
		switch {
		case typ == protowire.BytesType && (num == 1 || num == 4):
			v, n := protowire.ConsumeString(b)
			if n < 0 {
				return p, protowire.ParseError(n)
			}
			if num == 1 {
				p.AggregateID = v
			} else {
				p.Pad = v
			}
			b = b[n:]
		case typ == protowire.VarintType && (num == 2 || num == 3):
			v, n := protowire.ConsumeVarint(b)
			if n < 0 {
				return p, protowire.ParseError(n)
			}
			if num == 2 {
				p.Seq = int64(v)
			} else {
				p.AmountCents = int64(v)
			}
			b = b[n:]
		default:
			return p, fmt.Errorf("unexpected field %d type %d", num, typ)
		}
	}
	return p, nil
}

// TestFormatsDeliveryPaths: with every registry format (Avro, JSON Schema,
// Protobuf), against a real broker, the snapshot takeover (--snapshot all)
// sends the rows written before the slot, exactly-once delivery sends the
// streamed ones (read_committed), a payload that breaks the schema goes to
// the dead-letter topic as it was with the reason, and walbox replay sends
// the streamed range again encoded: every record decodes with the registered
// schema to its row's payload, once.
func TestFormatsDeliveryPaths(t *testing.T) {
	fulltest.Require(t, "every registry format through the snapshot, exactly-once, the dead-letter topic and replay, with a real broker")
	parallel(t)
	broker := kafkatest.Start(t, kafkatest.WithPartitions(2))
	reg := srfake.New()
	t.Cleanup(reg.Close)
	pg := pgtest.Start(t)
	for _, fc := range deliveryFormats {
		t.Run(fc.name, func(t *testing.T) { testFormatDelivery(t, fc, broker.Addrs(), reg, pg) })
	}
}

func testFormatDelivery(t *testing.T, fc formatCase, brokers []string, reg *srfake.Registry, pg *pgtest.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	short := strings.ReplaceAll(fc.name, "-", "")
	prefix, replayPrefix := "fmt"+short, "fmtreplay"+short
	ids := map[string]int{}
	for _, p := range []string{prefix, replayPrefix} {
		for _, typ := range []string{"order", "customer"} {
			id, _, err := reg.RegisterSchema(p+"."+typ+"-value", sr.Schema{Schema: fc.schema, Type: fc.typ})
			if err != nil {
				t.Fatal(err)
			}
			ids[p+"."+typ] = id
		}
	}
	db := pgtest.NewDatabase(t, pg)
	conn, err := pgx.Connect(ctx, pg.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, outboxtest.DDL); err != nil {
		t.Fatal(err)
	}
	gen := outboxtest.NewGenerator(11, 4)
	before := gen.Batch(3) // for the snapshot takeover
	if err := outboxtest.WriteTx(ctx, conn, before); err != nil {
		t.Fatal(err)
	}
	slot := "walbox_" + short
	env := []string{
		"WALBOX_PG_DSN=" + pg.DSN(db), "WALBOX_KAFKA_BROKERS=" + brokers[0], "WALBOX_SLOT=" + slot, "WALBOX_PUBLICATION=" + slot,
		"WALBOX_VALUE_FORMAT=" + fc.name, "WALBOX_SCHEMA_REGISTRY_URL=" + reg.URL(),
		"WALBOX_INVALID_ROWS=dead-letter", "WALBOX_DEAD_LETTER_TOPIC=" + prefix + ".dlq",
		"WALBOX_STATUS_INTERVAL=200ms", "WALBOX_METRICS_ADDR=127.0.0.1:0", "WALBOX_LOG_FORMAT=text",
	}
	col := startCollectorPattern(ctx, t, brokers, `^`+prefix+`\..*`)
	p := startWalbox(t, append(env, "WALBOX_REPLAY_WINDOW=1h"), "--topic", prefix+".{aggregate_type}", "--delivery", "exactly-once", "--snapshot", "all")
	waitUntil(ctx, t, time.Minute, "walbox to stream", func() bool { return strings.Contains(p.stderr.String(), "msg=streaming") || p.exited() })
	var from string
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&from); err != nil {
		t.Fatal(err)
	}
	streamed := gen.Batch(4)
	if err := outboxtest.WriteTx(ctx, conn, streamed); err != nil {
		t.Fatal(err)
	}
	bad := gen.Next()
	bad.Payload = []byte(`{"aggregate_id": "x", "seq": "seven", "amount_cents": 1, "pad": ""}`)
	if err := outboxtest.WriteTx(ctx, conn, []outboxtest.Event{bad}); err != nil {
		t.Fatal(err)
	}
	good := append(append([]outboxtest.Event{}, before...), streamed...)
	waitUntil(ctx, t, 2*time.Minute, "every record and the dead letter", func() bool { return col.distinct() >= len(good)+1 || p.exited() })
	if code := p.stop(t, syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Fatalf("walbox exit code %d", code)
	}
	check := func(what, topicPrefix string, want []outboxtest.Event, got []outboxtest.Received) {
		t.Helper()
		byID := map[string]outboxtest.Event{}
		for _, e := range want {
			byID[e.ID] = e
		}
		seen := map[string]int{}
		for _, r := range got {
			if r.Topic == prefix+".dlq" {
				continue
			}
			e, ok := byID[r.Headers["event_id"]]
			if !ok {
				t.Errorf("%s: record %s/%s matches no event", what, r.Topic, r.Headers["event_id"])
				continue
			}
			seen[e.ID]++
			topic := topicPrefix + "." + e.AggregateType
			id, body, err := schemareg.ParseHeader(r.Value)
			if err != nil || int(id) != ids[topic] || r.Topic != topic {
				t.Errorf("%s: record %s on %s: schema id %d (want %d on %s), %v", what, e.ID, r.Topic, id, ids[topic], topic, err)
				continue
			}
			gotP, err := fc.decode(body)
			var wantP generatorPayload
			_ = json.Unmarshal(e.Payload, &wantP)
			if err != nil || gotP != wantP {
				t.Errorf("%s: record %s decodes to %+v (%v), want %+v", what, e.ID, gotP, err, wantP)
			}
		}
		for _, e := range want {
			if seen[e.ID] != 1 {
				t.Errorf("%s: event %s received %d times, want once", what, e.ID, seen[e.ID])
			}
		}
	}
	got := col.snapshot()
	check("snapshot and exactly-once", prefix, good, got)
	dead := 0
	for _, r := range got {
		if r.Topic == prefix+".dlq" {
			dead++
			var gotV, wantV any
			_ = json.Unmarshal(r.Value, &gotV)
			_ = json.Unmarshal(bad.Payload, &wantV)
			if r.Headers["event_id"] != bad.ID || fmt.Sprint(gotV) != fmt.Sprint(wantV) || !strings.Contains(r.Headers["walbox_error"], "$") {
				t.Errorf("dead letter %v %s", r.Headers, r.Value)
			}
		}
	}
	if dead != 1 {
		t.Errorf("%d dead letters, want 1", dead)
	}

	// walbox replay of the streamed range, to other topics.
	rcol := startCollectorPattern(ctx, t, brokers, `^`+replayPrefix+`\..*`)
	res := runReplay(t, env, "--from", from, "--topic", replayPrefix+".{aggregate_type}")
	if res.code != 0 {
		t.Fatalf("walbox replay exited %d: %s", res.code, res.stderr)
	}
	waitUntil(ctx, t, time.Minute, "the replayed records", func() bool { return rcol.distinct() >= len(streamed) })
	var replayed []outboxtest.Received
	for _, r := range rcol.snapshot() {
		if r.Headers["event_id"] != bad.ID {
			replayed = append(replayed, r)
		}
	}
	check("replay", replayPrefix, streamed, replayed)
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("timed out")
	}
}
