package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/debezium/eventrouter"
	"github.com/walbox/walbox/internal/debeziumtest"
	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/internal/kafkatest"
	"github.com/walbox/walbox/internal/pgtest"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/router"
	"github.com/walbox/walbox/slotctl"
)

// dbzCase is one table shape with one EventRouter and converter
// configuration: a Debezium connector and a walbox relay each read the
// table through their own slot and write to their own topics.
type dbzCase struct {
	name string
	// columns is the table's column list, CREATE TABLE's body.
	columns string
	// props are the connector properties beyond debeziumtest's defaults
	// (transforms.outbox.*, key.converter, value.converter, ...).
	props map[string]string
	// insert is the column list of rows; rows are the VALUES tuples.
	insert string
	rows   []string
	// routed are the route-by values the rows carry, whose topics the test
	// creates and reads.
	routed []string
	// exactTimestamp: table.field.event.timestamp is set and every row has
	// it, so the record timestamps must be equal, not just plausible.
	exactTimestamp bool
	// tables is how many outbox tables of the same shape the connector
	// covers (table.include.list); row i goes to table i mod tables.
	tables int
	// unrouted are route-by values route.topic.regex does not match: their
	// records go to the value itself as topic, for both sides.
	unrouted []string
	// failing is how many of the last rows Debezium fails its task on;
	// walbox must stop on the first of them with an invalid-row error, and
	// neither side produces a record for them.
	failing int
}

const (
	dbzLogicalName = "dbz"
	dbzRunID       = "00000000-0000-7000-8000-00000000beef"
	jsonConv       = "org.apache.kafka.connect.json.JsonConverter"
	stringConv     = "org.apache.kafka.connect.storage.StringConverter"
	byteArrayConv  = "org.apache.kafka.connect.converters.ByteArrayConverter"
)

const canonicalColumns = `id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
	aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb`

const canonicalInsert = `id, aggregatetype, aggregateid, type, payload`

// canonicalRows exercise JSON payloads of every shape: nested objects and
// arrays, numbers of each Jackson type, escapes, NULL, empty containers.
var canonicalRows = []string{
	`('00000000-0000-4000-8000-000000000001', 'order', 'order-1', 'OrderCreated',
	  '{"n": 1, "item": "book", "price": 12.5, "tags": ["a", "b"], "nested": {"ok": true, "none": null}}')`,
	`('00000000-0000-4000-8000-000000000002', 'customer', 'cust-7', 'CustomerCreated',
	  '{"name": "Zoë \"Q\"\n\t\u0001", "big": 3000000000, "neg": -1}')`,
	`('00000000-0000-4000-8000-000000000003', 'order', 'order-2', 'OrderCreated', NULL)`,
	`('00000000-0000-4000-8000-000000000004', 'order', 'order-1', 'OrderCreated',
	  '{"arr": [{"a": 1}, {"a": 2}], "empty": [], "obj": {}, "x": 1e3, "y": 0.1, "z": 12345678.9, "w": 1e-7}')`,
	`('00000000-0000-4000-8000-000000000005', 'order', 'order-3', 'OrderCreated', '"a string"')`,
}

// unexpandableRows make Debezium's JSON expansion throw half way (a
// top-level array, an integer beyond 64 bits), which fails its task under
// JsonConverter; the cases without JsonConverter expansion get them too.
var unexpandableRows = []string{
	`('00000000-0000-4000-8000-000000000006', 'order', 'order-3', 'OrderCreated', '[1, 2]')`,
	`('00000000-0000-4000-8000-000000000007', 'customer', 'cust-8', 'CustomerCreated', '{"huge": 12345678901234567890123}')`,
}

func dbzCases() []dbzCase {
	canonical := func(name string, props map[string]string) dbzCase {
		rows := canonicalRows
		if props["value.converter"] != jsonConv || props["transforms.outbox.table.expand.json.payload"] != "true" {
			rows = append(slices.Clip(rows), unexpandableRows...)
		}
		return dbzCase{name: name, columns: canonicalColumns, props: props, insert: canonicalInsert,
			rows: rows, routed: []string{"order", "customer"}}
	}
	noSchemas := func(m map[string]string) map[string]string {
		m["key.converter.schemas.enable"] = "false"
		m["value.converter.schemas.enable"] = "false"
		return m
	}
	byType := canonical("canon_str", map[string]string{
		"transforms.outbox.route.by.field":    "type",
		"transforms.outbox.route.topic.regex": "(?<routedByValue>[A-Za-z]+)Created",
	})
	byType.routed = []string{"Order", "Customer"}
	byType.rows = append(slices.Clip(byType.rows),
		`('00000000-0000-4000-8000-000000000008', 'order', 'order-9', 'raw_canon_str', '{"unrouted": true}')`)
	byType.unrouted = []string{"raw_canon_str"}
	return []dbzCase{
		byType,
		canonical("canon_json", map[string]string{
			"key.converter": jsonConv, "value.converter": jsonConv,
		}),
		canonical("canon_json_noschema", noSchemas(map[string]string{
			"key.converter": jsonConv, "value.converter": jsonConv,
			"transforms.outbox.table.field.event.key": "id",
		})),
		canonical("expand_json", map[string]string{
			"key.converter": jsonConv, "value.converter": jsonConv,
			"transforms.outbox.table.expand.json.payload": "true",
		}),
		canonical("expand_json_bytes", noSchemas(map[string]string{
			"key.converter": jsonConv, "value.converter": jsonConv,
			"transforms.outbox.table.expand.json.payload":        "true",
			"transforms.outbox.table.json.payload.null.behavior": "optional_bytes",
		})),
		canonical("expand_str", map[string]string{
			"transforms.outbox.table.expand.json.payload": "true",
		}),
		{
			name: "text_tombstone",
			columns: `id uuid PRIMARY KEY, aggregatetype text NOT NULL, aggregateid text,
				type text NOT NULL, payload text`,
			props: map[string]string{
				"transforms.outbox.route.tombstone.on.empty.payload": "true",
				"value.converter": jsonConv, "value.converter.schemas.enable": "false",
			},
			insert: canonicalInsert,
			rows: []string{
				`('00000000-0000-4000-8000-000000000101', 'note', 'n-1', 'Noted', 'hello "world"')`,
				`('00000000-0000-4000-8000-000000000102', 'note', 'n-1', 'Noted', '')`,
				`('00000000-0000-4000-8000-000000000103', 'note', 'n-2', 'Noted', E'  \t ')`,
				`('00000000-0000-4000-8000-000000000104', 'note', 'n-2', 'Noted', NULL)`,
				`('00000000-0000-4000-8000-000000000105', 'note', NULL, 'Noted', E'multi\nline')`,
			},
			routed: []string{"note"},
		},
		{
			name: "placements",
			columns: `id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
				aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb,
				version integer NOT NULL, tracingspancontext varchar(512),
				created_at timestamp NOT NULL, occurred_at timestamptz, occurred_ms timestamptz(3),
				seq bigint, flag boolean, small smallint`,
			props: map[string]string{
				"key.converter": jsonConv, "value.converter": jsonConv,
				"transforms.outbox.table.field.event.timestamp": "created_at",
				"transforms.outbox.table.fields.additional.placement": "type:header:eventType,version:header," +
					"created_at:header:createdAt,occurred_at:header:occurredAt,occurred_ms:header," +
					"seq:header,flag:header,small:header," +
					"aggregateid:envelope:aggId,type:envelope,version:envelope:v,seq:envelope,flag:envelope,small:envelope",
			},
			insert: canonicalInsert + `, version, tracingspancontext, created_at, occurred_at, occurred_ms, seq, flag, small`,
			rows: []string{
				`('00000000-0000-4000-8000-000000000201', 'order', 'order-1', 'OrderCreated', '{"a": 1}', 1,
				  'traceparent=00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
				  '2026-11-30 12:34:56.789123', '2026-11-30 12:34:56.789123+00', '2026-11-30 12:34:56.789+00',
				  9007199254740993, true, -3)`,
				`('00000000-0000-4000-8000-000000000202', 'order', 'order-1', 'OrderPaid', NULL, 2, NULL,
				  '2026-11-30 12:35:00', '2026-11-30 14:35:00.1+02', '2026-11-30 14:35:00+02', NULL, false, NULL)`,
				`('00000000-0000-4000-8000-000000000203', 'shipment', 's-1', 'Shipped', '[]', 3, NULL,
				  '1999-01-02 03:04:05.000006', NULL, NULL, -1, NULL, 32767)`,
			},
			routed:         []string{"order", "shipment"},
			exactTimestamp: true,
		},
		func() dbzCase {
			c := canonical("noext", map[string]string{"extended.headers.enabled": "false"})
			c.rows = canonicalRows[:3]
			return c
		}(),
		{
			// topic.delimiter joins topic.prefix, schema and table into the
			// prefix of the record schemas' names (the envelope's value
			// schema shows it).
			name: "delimiter",
			columns: `id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
				aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb`,
			props: map[string]string{
				"key.converter": jsonConv, "value.converter": jsonConv,
				"topic.delimiter": "_",
				"transforms.outbox.table.fields.additional.placement": "type:envelope:eventType",
			},
			insert: canonicalInsert,
			rows: []string{
				`('00000000-0000-4000-8000-000000000451', 'order', 'o-1', 'OrderCreated', '{"total": 2}')`,
				`('00000000-0000-4000-8000-000000000452', 'order', 'o-2', 'OrderCreated', NULL)`,
			},
			routed: []string{"order"},
		},
		{
			name: "two_tables",
			columns: `id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
				aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb`,
			props: map[string]string{
				"key.converter": jsonConv, "value.converter": jsonConv,
				"transforms.outbox.table.fields.additional.placement": "type:envelope:eventType,type:header:eventType",
			},
			insert: canonicalInsert,
			rows: []string{
				`('00000000-0000-4000-8000-000000000401', 'invoice', 'i-1', 'InvoiceIssued', '{"total": 1}')`,
				`('00000000-0000-4000-8000-000000000402', 'order', 'o-1', 'OrderCreated', '{"total": 2}')`,
				`('00000000-0000-4000-8000-000000000403', 'order', 'o-2', 'OrderCreated', NULL)`,
				`('00000000-0000-4000-8000-000000000404', 'invoice', 'i-1', 'InvoicePaid', '{}')`,
			},
			routed: []string{"invoice", "order"},
			tables: 2,
		},
		{
			name: "defaults",
			columns: `id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
				aggregateid varchar(255) NOT NULL DEFAULT 'none', type varchar(255) NOT NULL DEFAULT 'Evt',
				payload jsonb DEFAULT '{}'::jsonb, status varchar(20) NOT NULL DEFAULT 'new',
				created_at timestamp(3) NOT NULL DEFAULT now(), n integer DEFAULT 42, note text DEFAULT NULL`,
			props: map[string]string{
				"key.converter": jsonConv, "value.converter": jsonConv,
				"transforms.outbox.table.field.event.timestamp": "created_at",
				"transforms.outbox.table.fields.additional.placement": "status:envelope,created_at:envelope," +
					"n:envelope,note:envelope,created_at:header:createdMs,n:header",
			},
			insert: `id, aggregatetype, payload, created_at, n`,
			rows: []string{
				`('00000000-0000-4000-8000-000000000501', 'order', '{"a": 1}', '2026-11-30 12:34:56.789', 7)`,
				`('00000000-0000-4000-8000-000000000502', 'order', NULL, '2026-11-30 12:34:57', NULL)`,
				`('00000000-0000-4000-8000-000000000503', 'order', DEFAULT, '2026-11-30 12:34:58.001', DEFAULT)`,
			},
			routed:         []string{"order"},
			exactTimestamp: true,
		},
		{
			// json (not jsonb) keeps the text as written: whitespace, key
			// order, repeated keys, escapes.
			name:    "json_expand",
			columns: `id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, aggregateid varchar(255) NOT NULL, type varchar(255), payload json`,
			props: map[string]string{
				"key.converter": jsonConv, "value.converter": jsonConv,
				"transforms.outbox.table.expand.json.payload": "true",
			},
			insert: canonicalInsert,
			rows: []string{
				`('00000000-0000-4000-8000-000000000701', 'order', 'o-1', 'T', '{ "b" : 1, "a": [ 1 , 2 ], "b": "again", "e": "\ud83d\ude00 😀 \u00e9" }')`,
				`('00000000-0000-4000-8000-000000000702', 'order', 'o-1', 'T', '{"n": 1.0, "m": -0, "k": 1E+2, "big": 9223372036854775807}')`,
				`('00000000-0000-4000-8000-000000000703', 'order', 'o-2', 'T', ' {"leading": "space"}')`,
			},
			routed: []string{"order"},
		},
		{
			// Nothing NOT NULL: null event id and key, JSON schemas optional.
			name:    "nullable",
			columns: `id text, aggregatetype text, aggregateid text, type text, payload text`,
			props: map[string]string{
				"key.converter": jsonConv, "value.converter": jsonConv,
				"transforms.outbox.table.fields.additional.placement": "type:header",
			},
			insert: canonicalInsert,
			rows: []string{
				`(NULL, 'note', NULL, NULL, 'x')`,
				`('id-2', 'note', 'k', 'T', NULL)`,
				`('id-3', 'note', '', '', '')`,
			},
			routed: []string{"note"},
		},
		{
			// A NULL route-by value: Debezium's RegexRouter throws and the
			// task fails; walbox's relay stops with router.ErrInvalidRow.
			name:    "fails",
			columns: `id uuid PRIMARY KEY, aggregatetype text, aggregateid text NOT NULL, type text, payload jsonb`,
			insert:  canonicalInsert,
			rows: []string{
				`('00000000-0000-4000-8000-000000000601', 'order', 'o-1', 'OrderCreated', '{}')`,
				`('00000000-0000-4000-8000-000000000602', NULL, 'o-1', 'OrderCreated', '{}')`,
			},
			routed:  []string{"order"},
			failing: 1,
		},
		bytea("bytea", byteArrayConv),
		bytea("bytea_str", stringConv),
		bytea("bytea_json", jsonConv),
	}
}

// bytea is a table with a bytea payload and a bytea header through the
// given value converter.
func bytea(name, valueConverter string) dbzCase {
	return dbzCase{
		name: name,
		columns: `id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
			aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, payload bytea, sig bytea`,
		props: map[string]string{
			"value.converter": valueConverter,
			"transforms.outbox.table.fields.additional.placement": "sig:header",
		},
		insert: canonicalInsert + `, sig`,
		rows: []string{
			`('00000000-0000-4000-8000-000000000301', 'blob', 'b-1', 'Stored', '\x00ff10'::bytea, '\xdeadbeef'::bytea)`,
			`('00000000-0000-4000-8000-000000000302', 'blob', 'b-1', 'Stored', ''::bytea, ''::bytea)`,
			`('00000000-0000-4000-8000-000000000303', 'blob', 'b-2', 'Stored', NULL, NULL)`,
		},
		routed: []string{"blob"},
	}
}

// tableNames are the case's outbox tables, without schema.
func (c dbzCase) tableNames() []string {
	names := []string{"ob_" + c.name}
	for i := 1; i < c.tables; i++ {
		names = append(names, fmt.Sprintf("ob_%s_%d", c.name, i+1))
	}
	return names
}

// qualified returns the case's tables as schema.table.
func (c dbzCase) qualified() []string {
	var q []string
	for _, n := range c.tableNames() {
		q = append(q, "public."+n)
	}
	return q
}

// topic is a side's topic for a route-by value.
func (c dbzCase) topic(side, routed string) string { return side + "." + c.name + "." + routed }

// connectorProps are the case's connector properties for Debezium.
func (c dbzCase) connectorProps() map[string]string {
	p := map[string]string{
		"table.include.list": strings.Join(c.qualified(), ","),
		"slot.name":          "dbz_" + c.name,
		"publication.name":   "dbz_" + c.name,
		"topic.prefix":       dbzLogicalName,
		"transforms.outbox.route.topic.replacement": c.topic("dbz", "${routedByValue}"),
	}
	maps.Copy(p, c.props)
	return p
}

// routerConfig is the same configuration for walbox, as package debezium
// translates it.
func (c dbzCase) routerConfig(t *testing.T) eventrouter.Config {
	cfg := eventrouter.Defaults()
	cfg.Tables = c.qualified()
	cfg.LogicalName = dbzLogicalName
	cfg.ConnectorName = "dbz-" + c.name
	cfg.RunID = dbzRunID
	cfg.TopicReplacement = c.topic("wb", "${routedByValue}")
	// debeziumtest's worker and connector default to StringConverter.
	cfg.KeyConverter = eventrouter.ConverterConfig{Kind: eventrouter.StringConverter}
	cfg.ValueConverter = eventrouter.ConverterConfig{Kind: eventrouter.StringConverter}
	conv := func(class, schemas string) eventrouter.ConverterConfig {
		k := map[string]eventrouter.Converter{
			jsonConv: eventrouter.JSONConverter, stringConv: eventrouter.StringConverter, byteArrayConv: eventrouter.ByteArrayConverter,
		}[class]
		if k == "" {
			t.Fatalf("case %s: converter %s unknown to the test", c.name, class)
		}
		return eventrouter.ConverterConfig{Kind: k, SchemasEnable: schemas != "false"}
	}
	for k, v := range c.props {
		switch k {
		case "key.converter":
			cfg.KeyConverter = conv(v, c.props["key.converter.schemas.enable"])
		case "value.converter":
			cfg.ValueConverter = conv(v, c.props["value.converter.schemas.enable"])
		case "key.converter.schemas.enable", "value.converter.schemas.enable":
		case "extended.headers.enabled":
			cfg.ExtendedHeaders = v == "true"
		case "topic.delimiter":
			cfg.TopicDelimiter = v
		case "transforms.outbox.route.by.field":
			cfg.RouteByColumn = v
		case "transforms.outbox.route.topic.regex":
			cfg.TopicRegex = v
		case "transforms.outbox.table.field.event.key":
			cfg.EventKeyColumn = v
		case "transforms.outbox.table.field.event.timestamp":
			cfg.EventTimestampColumn = v
		case "transforms.outbox.table.expand.json.payload":
			cfg.ExpandJSONPayload = v == "true"
		case "transforms.outbox.table.json.payload.null.behavior":
			cfg.JSONPayloadNullBehavior = v
		case "transforms.outbox.route.tombstone.on.empty.payload":
			cfg.TombstoneOnEmptyPayload = v == "true"
		case "transforms.outbox.table.fields.additional.placement":
			for _, e := range strings.Split(v, ",") {
				parts := strings.Split(e, ":")
				p := eventrouter.Placement{Column: parts[0], Location: parts[1]}
				if len(parts) > 2 {
					p.Alias = parts[2]
				}
				cfg.AdditionalPlacement = append(cfg.AdditionalPlacement, p)
			}
		default:
			t.Fatalf("case %s: property %s unknown to the test's translation", c.name, k)
		}
	}
	return cfg
}

// TestDebeziumRecordsMatch runs real Debezium (Connect standalone, the
// Postgres connector and the Outbox EventRouter, one connector per case in
// one JVM) and walbox's relay with eventrouter on the same rows, each
// through its own slot into its own topics of one real broker, and
// compares the records byte for byte: topic (after the side's prefix),
// partition, key, value, headers in order (the run id only in form) and
// timestamp (equal when taken from table.field.event.timestamp; otherwise
// both are processing times, checked to lie between the moment before the
// row's INSERT and the end of the test: walbox's Debezium mode stamps
// the processing time as Debezium does, not the commit time of its native
// mode).
func TestDebeziumRecordsMatch(t *testing.T) {
	fulltest.Require(t, "Debezium byte-for-byte comparison, runs Kafka Connect")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cases := dbzCases()

	// Two slots and two walsenders per case.
	srv := pgtest.Start(t, func(o *pgtest.Options) {
		o.Settings = map[string]string{"max_replication_slots": "40", "max_wal_senders": "40",
			// Debezium speaks protocol 1: 64kB would make it spill.
			"logical_decoding_work_mem": pgtest.ServerDefault}
	})
	broker := kafkatest.Start(t)
	db := pgtest.NewDatabase(t, srv)
	conn, err := pgx.Connect(ctx, srv.DSN(db))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, c := range cases {
		for _, table := range c.qualified() {
			if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE TABLE %s (%s)", table, c.columns)); err != nil {
				t.Fatalf("case %s: %v", c.name, err)
			}
		}
	}

	// Every topic up front, three partitions each, so both sides hash keys
	// over the same partition count and the reader knows what to read.
	var topics []string
	unroutedCase := map[string]string{} // topic → case
	for _, c := range cases {
		for _, r := range c.routed {
			topics = append(topics, c.topic("dbz", r), c.topic("wb", r))
		}
		for _, u := range c.unrouted {
			topics = append(topics, u)
			unroutedCase[u] = c.name
		}
	}
	adm, err := kgo.NewClient(kgo.SeedBrokers(broker.Addrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := kadm.NewClient(adm).CreateTopics(ctx, 3, 1, nil, topics...); err != nil {
		t.Fatal(err)
	}

	// Debezium: the first connector starts Connect, the others join it
	// through the REST API.
	pg := debeziumtest.PG{Port: srv.Port(), DBName: db}
	connect := debeziumtest.StartT(t, debeziumtest.Options{
		Name: "dbz-" + cases[0].name, Bootstrap: broker.Addr(), PG: pg, Connector: cases[0].connectorProps(),
	})
	for _, c := range cases[1:] {
		props := debeziumtest.DefaultConnectorProperties("dbz-"+c.name, pg)
		maps.Copy(props, c.connectorProps())
		addConnector(ctx, t, connect.RESTAddr(), "dbz-"+c.name, props)
	}
	for _, c := range cases[1:] {
		waitConnectorRunning(ctx, t, conn, connect, "dbz-"+c.name, "dbz_"+c.name)
	}

	// walbox: one relay per case with its own slot.
	relays := map[string]*relayRun{}
	for _, c := range cases {
		relays[c.name] = startEventRouterRelay(ctx, t, srv.DSN(db), conn, broker.Addrs(), c)
	}

	// Each row commits after the moment before its INSERT: a processing
	// time cannot be earlier (Kafka timestamps are milliseconds).
	insertedAfter := map[string]time.Time{}
	want := 0
	for _, c := range cases {
		tables := c.qualified()
		for i, r := range c.rows {
			table := tables[i%len(tables)]
			insertedAfter[c.name+"\x00"+rowID(r)] = time.Now().Truncate(time.Millisecond)
			if _, err := conn.Exec(ctx, fmt.Sprintf("INSERT INTO %s (%s) VALUES %s", table, c.insert, r)); err != nil {
				t.Fatalf("case %s: insert %s: %v", c.name, r, err)
			}
			if i < len(c.rows)-c.failing {
				want++
			}
		}
	}

	got := consumeAll(ctx, t, broker.Addrs(), topics, 2*want)
	windowEnd := time.Now().Add(time.Second)

	type recKey struct{ side, cas, id string }
	byKey := map[recKey]*kgo.Record{}
	for _, r := range got {
		side, rest, _ := strings.Cut(r.Topic, ".")
		cas, _, _ := strings.Cut(rest, ".")
		if c, ok := unroutedCase[r.Topic]; ok {
			// Both sides write to the route-by value; walbox's records
			// carry the test's run id.
			side, cas = "dbz", c
			if dbzHeader(r, eventrouter.HeaderRunID) == dbzRunID {
				side = "wb"
			}
		}
		k := recKey{side, cas, dbzHeader(r, "id")}
		if byKey[k] != nil {
			t.Errorf("two records for %v", k)
		}
		byKey[k] = r
	}
	matched := 0
	for _, c := range cases {
		for i := range c.rows[:len(c.rows)-c.failing] {
			id := rowID(c.rows[i])
			d, w := byKey[recKey{"dbz", c.name, id}], byKey[recKey{"wb", c.name, id}]
			if d == nil || w == nil {
				t.Errorf("case %s row %s: Debezium record %v, walbox record %v", c.name, id, d != nil, w != nil)
				continue
			}
			if diffs := compareRecords(c, d, w, insertedAfter[c.name+"\x00"+id], windowEnd); len(diffs) > 0 {
				t.Errorf("case %s row %s differs:\n  %s", c.name, id, strings.Join(diffs, "\n  "))
				continue
			}
			matched++
		}
	}
	t.Logf("%d of %d rows produced identical records from Debezium and walbox", matched, want)

	// Where Debezium fails its task, walbox stops too, with an error its
	// invalid-row policy handles, before producing anything for the row.
	for _, c := range cases {
		if c.failing == 0 {
			continue
		}
		select {
		case err := <-relays[c.name].done:
			if !errors.Is(err, router.ErrInvalidRow) {
				t.Errorf("case %s: walbox relay ended with %v, want an invalid-row error", c.name, err)
			} else {
				t.Logf("case %s: walbox stopped: %v", c.name, err)
			}
		case <-time.After(time.Minute):
			t.Errorf("case %s: walbox relay still running a minute after the row Debezium fails on", c.name)
		}
		trace := waitConnectorFailed(ctx, t, connect.RESTAddr(), "dbz-"+c.name)
		t.Logf("case %s: Debezium's task FAILED: %s", c.name, firstLine(trace))
		for _, id := range []string{rowID(c.rows[len(c.rows)-c.failing])} {
			for side := range map[string]bool{"dbz": true, "wb": true} {
				if r := byKey[recKey{side, c.name, id}]; r != nil {
					t.Errorf("case %s: %s produced a record for the failing row %s", c.name, side, id)
				}
			}
		}
	}
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// waitConnectorFailed polls a connector until its task reports FAILED and
// returns the task's trace.
func waitConnectorFailed(ctx context.Context, t *testing.T, restAddr, name string) string {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for time.Now().Before(deadline) {
		var st struct {
			Tasks []struct{ State, Trace string }
		}
		resp, err := http.Get("http://" + restAddr + "/connectors/" + name + "/status")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		if err == nil && len(st.Tasks) > 0 && st.Tasks[0].State == "FAILED" {
			return st.Tasks[0].Trace
		}
		select {
		case <-ctx.Done():
			t.Fatalf("connector %s: %v", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Errorf("connector %s: task not FAILED a minute after the row Debezium cannot route", name)
	return ""
}

// rowID is the event id a row inserts: its first value, "" for NULL.
func rowID(row string) string {
	row = strings.TrimSpace(strings.TrimPrefix(row, "("))
	if strings.HasPrefix(row, "NULL") {
		return ""
	}
	id, _, _ := strings.Cut(strings.TrimPrefix(row, "'"), "'")
	return id
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// compareRecords lists how walbox's record w differs from Debezium's d.
func compareRecords(c dbzCase, d, w *kgo.Record, from, to time.Time) []string {
	var diffs []string
	dt, wt := strings.TrimPrefix(d.Topic, "dbz."), strings.TrimPrefix(w.Topic, "wb.")
	if dt != wt {
		diffs = append(diffs, fmt.Sprintf("topic: Debezium %s, walbox %s", d.Topic, w.Topic))
	}
	if d.Key != nil && d.Partition != w.Partition {
		diffs = append(diffs, fmt.Sprintf("partition: Debezium %d, walbox %d", d.Partition, w.Partition))
	}
	if !bytesEqualNil(d.Key, w.Key) {
		diffs = append(diffs, fmt.Sprintf("key:\n    Debezium %s\n    walbox   %s", showBytes(d.Key), showBytes(w.Key)))
	}
	if !bytesEqualNil(d.Value, w.Value) {
		diffs = append(diffs, fmt.Sprintf("value:\n    Debezium %s\n    walbox   %s", showBytes(d.Value), showBytes(w.Value)))
	}
	if hd, hw := headerList(d, false), headerList(w, false); hd != hw {
		diffs = append(diffs, fmt.Sprintf("headers:\n    Debezium %s\n    walbox   %s", hd, hw))
	}
	if run := dbzHeader(d, eventrouter.HeaderRunID); c.props["extended.headers.enabled"] != "false" && !uuidRE.MatchString(run) {
		diffs = append(diffs, fmt.Sprintf("Debezium's run id header %q is not a UUID", run))
	}
	if c.exactTimestamp {
		if !d.Timestamp.Equal(w.Timestamp) {
			diffs = append(diffs, fmt.Sprintf("timestamp: Debezium %v, walbox %v", d.Timestamp.UTC(), w.Timestamp.UTC()))
		}
	} else {
		for side, ts := range map[string]time.Time{"Debezium": d.Timestamp, "walbox": w.Timestamp} {
			if ts.Before(from) || ts.After(to) {
				diffs = append(diffs, fmt.Sprintf("timestamp: %s %v outside [%v, %v], from before the row's INSERT to the end of the test: not a processing time", side, ts, from, to))
			}
		}
	}
	return diffs
}

func bytesEqualNil(a, b []byte) bool { return (a == nil) == (b == nil) && bytes.Equal(a, b) }

func showBytes(b []byte) string {
	if b == nil {
		return "<null>"
	}
	return fmt.Sprintf("%q", b)
}

// headerList renders headers in order, the run id's value masked.
func headerList(r *kgo.Record, withRunID bool) string {
	var parts []string
	for _, h := range r.Headers {
		v := showBytes(h.Value)
		if h.Key == eventrouter.HeaderRunID && !withRunID {
			v = "<run id>"
		}
		parts = append(parts, h.Key+"="+v)
	}
	return strings.Join(parts, " ")
}

func dbzHeader(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// addConnector creates a connector on a running standalone worker.
func addConnector(ctx context.Context, t *testing.T, restAddr, name string, props map[string]string) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"name": name, "config": props})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+restAddr+"/connectors", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("create connector %s: %v", name, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("create connector %s: %s: %s", name, resp.Status, msg)
	}
}

// waitConnectorRunning polls a connector's status until its task runs and
// its slot streams, so that rows inserted afterwards reach it.
func waitConnectorRunning(ctx context.Context, t *testing.T, conn *pgx.Conn, c *debeziumtest.Connect, name, slot string) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	last := ""
	for time.Now().Before(deadline) {
		var st struct {
			Connector struct{ State, Trace string }
			Tasks     []struct{ State, Trace string }
		}
		resp, err := http.Get("http://" + c.RESTAddr() + "/connectors/" + name + "/status")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&st)
			resp.Body.Close()
		}
		switch {
		case err != nil:
			last = err.Error()
		case len(st.Tasks) > 0 && st.Tasks[0].State == "FAILED":
			t.Fatalf("connector %s: task FAILED: %s", name, st.Tasks[0].Trace)
		case len(st.Tasks) > 0 && st.Tasks[0].State == "RUNNING":
			var active bool
			err := conn.QueryRow(ctx, "SELECT active FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
			if err == nil && active {
				return
			}
			last = fmt.Sprintf("task RUNNING, slot %s active=%v (%v)", slot, active, err)
		default:
			last = fmt.Sprintf("connector %s, %d tasks", st.Connector.State, len(st.Tasks))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("connector %s: %v (last: %s)", name, ctx.Err(), last)
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("connector %s not streaming after 3 minutes (last: %s)", name, last)
}

// relayRun is a running walbox relay; done receives Run's result once.
type relayRun struct{ done chan error }

// startEventRouterRelay runs walbox's relay with eventrouter for one case
// until the test ends. An error from Run fails the test unless the case
// has failing rows (the test reads it from done then).
func startEventRouterRelay(ctx context.Context, t *testing.T, dsn string, conn *pgx.Conn, brokers []string, c dbzCase) *relayRun {
	t.Helper()
	slotCfg := slotctl.Config{Table: c.qualified()[0], Slot: "wb_" + c.name, Publication: "wb_" + c.name, CreateMissing: true}
	if c.tables > 1 {
		// slotctl manages single-table publications.
		if _, err := conn.Exec(ctx, fmt.Sprintf("CREATE PUBLICATION %s FOR TABLE %s WITH (publish = 'insert')",
			slotCfg.Publication, strings.Join(c.qualified(), ", "))); err != nil {
			t.Fatal(err)
		}
	} else if err := slotctl.EnsurePublication(ctx, conn, slotCfg); err != nil {
		t.Fatal(err)
	}
	slot, err := slotctl.EnsureSlot(ctx, conn, slotCfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg := c.routerConfig(t)
	if cfg.Columns, err = eventrouter.LoadColumns(ctx, conn, cfg.Tables); err != nil {
		t.Fatal(err)
	}
	rt, err := eventrouter.New(cfg)
	if err != nil {
		t.Fatalf("case %s: %v", c.name, err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	reg := prometheus.NewRegistry()
	kcl, err := pipeline.NewKafkaClient(pipeline.KafkaConfig{Brokers: brokers}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	relay, err := pipeline.New(pipeline.Config{
		ConnString: dsn, Slot: slotCfg.Slot, Publication: slotCfg.Publication,
		Tables: cfg.Tables, StatusInterval: time.Second,
	}, kcl, rt, reg, log)
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	run := &relayRun{done: make(chan error, 1)}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		err := relay.Run(rctx, pglogrepl.LSN(slot.ConfirmedFlushLSN))
		if err != nil && c.failing == 0 && rctx.Err() == nil {
			t.Errorf("case %s: walbox relay: %v", c.name, err)
		}
		run.done <- err
	}()
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		kcl.Close()
	})
	return run
}

// consumeAll reads topics from the start until n records arrived.
func consumeAll(ctx context.Context, t *testing.T, brokers, topics []string, n int) []*kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topics...),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	pctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var got []*kgo.Record
	for len(got) < n {
		fetches := cl.PollFetches(pctx)
		if pctx.Err() != nil {
			var have []string
			for _, r := range got {
				have = append(have, r.Topic+"/"+dbzHeader(r, "id"))
			}
			slices.Sort(have)
			t.Fatalf("consumed %d of %d records before the deadline: %v", len(got), n, have)
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
