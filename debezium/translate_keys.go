package debezium

import (
	"regexp"
	"strconv"
	"strings"
)

// Connector keys walbox accepts with a warning: they have no effect on the
// records walbox produces (why in the value).
var connectorNoEffect = map[string]string{
	"tasks.max":                           "the Postgres connector runs one task; so does walbox",
	"poll.interval.ms":                    "Debezium's wait between polls of its queue; walbox sends as soon as a change arrives",
	"max.batch.size":                      "Debezium's queue batch; walbox bounds what is in flight with --max-inflight-records",
	"max.queue.size":                      "Debezium's queue size; walbox bounds what is in flight with --max-inflight-records",
	"max.queue.size.in.bytes":             "Debezium's queue size; walbox bounds what is in flight with --max-inflight-bytes",
	"topic.heartbeat.prefix":              "names Debezium's heartbeat topic; walbox writes no heartbeat records",
	"slot.max.retries":                    "walbox retries with --reconnect-backoff-min/max",
	"slot.retry.delay.ms":                 "walbox retries with --reconnect-backoff-min/max",
	"retriable.restart.connector.wait.ms": "walbox retries with --reconnect-backoff-min/max",
	"xmin.fetch.interval.ms":              "walbox does not read xmin",
	"lsn.flush.timeout.ms":                "walbox confirms positions at every status interval",
	"lsn.flush.timeout.action":            "walbox confirms positions at every status interval",
	"database.query.timeout.ms":           "a JDBC timeout; no effect on the records",
	"include.unknown.datatypes":           "the outbox columns walbox reads are text, jsonb, uuid, bytea or timestamps",
	"include.schema.changes":              "the Postgres connector writes no schema change records",
	"tombstones.on.delete":                "the EventRouter drops deletes (table.op.invalid.behavior); walbox routes only inserts",
	"message.key.columns":                 "the EventRouter replaces the key with table.field.event.key",
	"table.ignore.builtin":                "walbox streams only the outbox tables",
	"unavailable.value.placeholder":       "the outbox tables receive inserts only, which carry every value",
	"custom.metric.tags":                  "Debezium's JMX metrics; walbox exports Prometheus metrics",
	"topic.cache.size":                    "a cache of topic names",
	"errors.log.enable":                   "Connect's error log; walbox logs every error",
	"errors.log.include.messages":         "Connect's error log; walbox logs every error",
	"errors.retry.timeout":                "walbox retries transient failures with --reconnect-backoff-min/max",
	"errors.retry.delay.max.ms":           "walbox retries transient failures with --reconnect-backoff-min/max",
	"config.action.reload":                "walbox reads its configuration at start",
	"snapshot.fetch.size":                 "walbox does not take Debezium snapshots",
	"snapshot.lock.timeout.ms":            "walbox does not take Debezium snapshots",
	"snapshot.delay.ms":                   "walbox does not take Debezium snapshots",
	"snapshot.max.threads":                "walbox does not take Debezium snapshots",
	"snapshot.locking.mode":               "walbox does not take Debezium snapshots",
	"snapshot.isolation.mode":             "walbox does not take Debezium snapshots",
	"streaming.delay.ms":                  "walbox starts streaming at once",
	"incremental.snapshot.chunk.size":     "walbox does not take incremental snapshots",
	"offset.flush.interval.ms":            "walbox confirms the slot as Kafka acknowledges, with no offsets of its own",
	"offset.flush.timeout.ms":             "walbox confirms the slot as Kafka acknowledges, with no offsets of its own",
}

// Connector keys that walbox accepts when they have Debezium's default
// (value) and reports otherwise, with why.
var connectorDefaultOnly = map[string]struct{ def, why string }{
	"provide.transaction.metadata":           {"false", "walbox writes no transaction metadata records"},
	"event.processing.failure.handling.mode": {"fail", "walbox never skips a change it cannot process (see --invalid-rows for rows that cannot be routed)"},
	"errors.tolerance":                       {"none", "walbox never skips a record it cannot produce"},
	"binary.handling.mode":                   {"bytes", "walbox reproduces the default handling of bytea payloads only"},
	"decimal.handling.mode":                  {"precise", "walbox reproduces the default value conversions only"},
	"time.precision.mode":                    {"adaptive", "walbox reproduces the default value conversions only"},
	"hstore.handling.mode":                   {"json", "walbox reproduces the default value conversions only"},
	"interval.handling.mode":                 {"numeric", "walbox reproduces the default value conversions only"},
	"field.name.adjustment.mode":             {"none", "walbox reproduces the default names only"},
	"schema.name.adjustment.mode":            {"none", "walbox reproduces the default names only"},
	"money.fraction.digits":                  {"2", "walbox reproduces the default value conversions only"},
	"skipped.operations":                     {"t", "walbox routes inserts only; other operations are never events"},
}

// knownConnectorKeys handles the keys that are neither mapped nor
// specific to one part: warnings and default-only keys.
func (t *translator) knownConnectorKeys() {
	c := t.conn
	for _, e := range c.Entries() {
		if t.used[c][e.Key] {
			continue
		}
		v := strings.TrimSpace(e.Value)
		if why, ok := connectorNoEffect[e.Key]; ok {
			t.warn(c, e.Key, why+"; no effect on the records")
			continue
		}
		if d, ok := connectorDefaultOnly[e.Key]; ok {
			if strings.EqualFold(v, d.def) || (e.Key == "skipped.operations" && !strings.Contains(v, "c")) {
				t.used[c][e.Key] = true
				t.mapped(c, e.Key, "(default)", "")
			} else {
				t.fail(c, e.Key, d.why, "remove it (Debezium's default is "+d.def+")")
			}
			continue
		}
		switch {
		case e.Key == "slot.stream.params":
			t.slotStreamParams(c, v)
		case e.Key == "topic.naming.strategy":
			switch v {
			case schemaTopicNamingStrategy, "":
				t.used[c][e.Key] = true
				t.mapped(c, e.Key, "(default)", "the Postgres connector's default: topic.prefix, schema and table joined by topic.delimiter, which also names the record schemas")
			default:
				t.fail(c, e.Key, "walbox names record schemas as "+schemaTopicNamingStrategy+" (the Postgres connector's default) does, not as "+v,
					"remove it, or stay on Debezium: the strategy also names the schemas in the records (with JsonConverter and schemas.enable=true)")
			}
		case e.Key == "topic.delimiter":
			t.used[c][e.Key] = true
			t.out.Router.TopicDelimiter = e.Value
			t.mapped(c, e.Key, "eventrouter.TopicDelimiter", "joins topic.prefix, schema and table in the record schemas' names")
		case e.Key == "heartbeat.interval.ms":
			t.heartbeatInterval(c, v)
		case e.Key == "errors.max.retries":
			t.used[c][e.Key] = true
			if n, err := strconv.Atoi(v); err != nil || n < -1 {
				t.fail(c, e.Key, "not a number of retries", "give -1 (no limit, Debezium's default), 0 or a positive number")
			} else if n == -1 {
				t.mapped(c, e.Key, "(default)", "walbox retries transient Postgres failures without limit, with --reconnect-backoff-min/max")
			} else {
				t.warn(c, e.Key, "walbox retries transient Postgres failures without limit, with --reconnect-backoff-min/max, and stops at once on the others; this limit is not applied and has no effect on the records")
			}
		case e.Key == "snapshot.mode":
			switch strings.ToLower(v) {
			case "never", "no_data", "schema_only":
				t.used[c][e.Key] = true
				t.mapped(c, e.Key, "(default)", "walbox streams changes only, like this mode")
			case "initial", "when_needed":
				t.warn(c, e.Key, "walbox streams from the slot and never re-reads the outbox tables: taking over Debezium's slot, there is nothing to snapshot; on a first start without Debezium, rows already in the tables are not sent")
			default:
				t.fail(c, e.Key, "walbox does not take Debezium snapshots", "remove it (use --snapshot on a first start)")
			}
		case strings.HasPrefix(e.Key, "snapshot.") || strings.HasPrefix(e.Key, "incremental.snapshot.") || strings.HasPrefix(e.Key, "read.only"):
			if v == "" {
				t.warn(c, e.Key, "empty")
				continue
			}
			t.fail(c, e.Key, "walbox does not take Debezium snapshots", "remove it")
		case e.Key == "heartbeat.action.query" || strings.HasPrefix(e.Key, "signal.") || strings.HasPrefix(e.Key, "notification."):
			t.fail(c, e.Key, "walbox runs no queries and reads no signals", "remove it (walbox's --heartbeat-interval keeps the slot moving on an idle outbox)")
		case strings.HasPrefix(e.Key, "topic.creation."):
			t.warn(c, e.Key, "walbox creates no topics; create them with the same settings (or let the brokers auto-create them)")
		case strings.HasPrefix(e.Key, "errors.deadletterqueue."):
			t.fail(c, e.Key, "Connect's dead letter queue is for sink connectors", "remove it (walbox's --invalid-rows dead-letter is its own)")
		case strings.HasPrefix(e.Key, "predicates"):
			t.fail(c, e.Key, "walbox does not evaluate transform predicates", "remove it")
		case e.Key == "converters" || strings.HasPrefix(e.Key, "column.") || strings.HasPrefix(e.Key, "datatype.propagate"):
			t.fail(c, e.Key, "custom converters and column transformations change values walbox reproduces as Debezium's defaults", "remove it")
		}
	}
}

// Worker keys that only concern the Connect worker itself.
var workerOwnPrefixes = []string{
	"rest.", "listeners", "admin.listeners", "plugin.path", "plugin.discovery", "group.id", "config.storage.", "status.storage.",
	"offset.storage.", "offset.flush.", "consumer.", "admin.", "task.shutdown.", "connector.client.config.override.policy",
	"scheduled.rebalance.", "worker.sync.", "worker.unsync.", "session.timeout.ms", "heartbeat.interval.ms", "rebalance.timeout.ms",
	"metrics.", "metric.reporters", "response.http.headers.", "access.control.", "exactly.once.source.support", "inter.worker.",
	"topic.creation.enable", "topic.tracking.", "config.providers", "internal.key.converter", "internal.value.converter",
	"client.dns.lookup", "client.id", "auto.include.jmx.reporter", "request.timeout.ms", "retry.backoff.ms", "reconnect.backoff.",
	"connections.max.idle.ms", "receive.buffer.bytes", "send.buffer.bytes", "security.protocol", "sasl.", "ssl.",
	"key.converter.", "value.converter.", "header.converter", "task.", "errors.",
}

// workerKeys records what the worker file sets besides the producer and the
// converters.
func (t *translator) workerKeys() {
	w := t.worker
	if w == nil {
		return
	}
	if v, ok := t.get(w, "offset.storage.file.filename"); ok {
		t.out.OffsetsFile = v
		t.mapped(w, "offset.storage.file.filename", "migrate-from-debezium --debezium-offsets", "Connect standalone's offsets file")
	}
	if v, ok := t.get(w, "offset.storage.topic"); ok {
		t.out.OffsetsTopic = v
		t.mapped(w, "offset.storage.topic", "migrate-from-debezium --debezium-offsets-topic", "Connect distributed's offsets topic")
	}
	for _, e := range w.Entries() {
		if t.used[w][e.Key] {
			continue
		}
		own := false
		for _, p := range workerOwnPrefixes {
			if strings.HasPrefix(e.Key, p) {
				own = true
				break
			}
		}
		if own {
			why := "a setting of the Connect worker itself; no effect on the records"
			if e.Key == "security.protocol" || strings.HasPrefix(e.Key, "sasl.") || strings.HasPrefix(e.Key, "ssl.") {
				why = "the worker's own clients use it, not Connect's producer (which takes producer." + e.Key + "), so walbox does not either"
			}
			t.warn(w, e.Key, why)
			continue
		}
		t.warn(w, e.Key, "a worker setting walbox does not know; it has no effect on walbox")
	}
}

// configProviderRE matches a Kafka Connect config provider reference,
// ${provider:[path:]key}, which Connect resolves and walbox does not.
var configProviderRE = regexp.MustCompile(`\$\{[A-Za-z0-9_.-]+:[^}]*\}`)

// leftovers reports every connector key nothing handled, and values that
// use a config provider.
func (t *translator) leftovers() {
	c := t.conn
	for _, p := range []*Properties{t.conn, t.worker} {
		for _, e := range p.Entries() {
			if configProviderRE.MatchString(e.Value) {
				t.problems = append(t.problems, Problem{Key: e.Key, Where: p.Where(e.Key), Value: redact(e.Key, e.Value),
					Why: "uses a Kafka Connect config provider (${provider:path:key}), which walbox does not resolve",
					Fix: "put the value itself in the file, or set the walbox option it maps to (for a password: WALBOX_PG_DSN or --kafka-sasl-password-file)"})
			}
		}
	}
	for _, e := range c.Entries() {
		if !t.used[c][e.Key] {
			t.fail(c, e.Key, "a connector setting walbox does not know", "remove it, or check its spelling")
		}
	}
	for _, d := range c.Duplicates {
		t.out.Warnings = append(t.out.Warnings, Problem{Key: d, Where: c.Source, Why: "given more than once; the last value counts, as in Kafka Connect"})
	}
}

// schemaTopicNamingStrategy is topic.naming.strategy's default for the
// Postgres connector, the one walbox reproduces.
const schemaTopicNamingStrategy = "io.debezium.schema.SchemaTopicNamingStrategy"

// slotStreamParams maps slot.stream.params, Debezium's semicolon-separated
// key=value parameters for the decoding plugin. walbox sets pgoutput's
// parameters itself; origin (PostgreSQL 16+) is the one that changes what
// is streamed, so it maps to --pg-origin. Any other is refused: silently
// dropping it could change the records.
func (t *translator) slotStreamParams(c *Properties, v string) {
	key := "slot.stream.params"
	t.used[c][key] = true
	var unsupported []string
	origin := ""
	for _, kv := range strings.Split(v, ";") {
		kv = strings.TrimSpace(kv)
		if kv == "" {
			continue
		}
		k, val, _ := strings.Cut(kv, "=")
		k, val = strings.TrimSpace(k), strings.TrimSpace(val)
		if k == "origin" && (val == "none" || val == "any") {
			origin = val
			continue
		}
		unsupported = append(unsupported, kv)
	}
	switch {
	case len(unsupported) > 0:
		t.fail(c, key, "walbox sets pgoutput's parameters itself and passes only origin (none or any) through, not "+strings.Join(quoteAll(unsupported), ", "),
			"remove them (origin=none, PostgreSQL 16+, is --pg-origin none)")
	case origin != "":
		t.setOption("pg-origin", origin, key)
		t.mapped(c, key, "--pg-origin", "pgoutput's origin parameter; none needs PostgreSQL 16+")
	default:
		t.mapped(c, key, "(default)", "empty")
	}
}

// heartbeatInterval maps heartbeat.interval.ms. Debezium's heartbeats keep
// its slot moving on an idle outbox and write records to its heartbeat
// topic (__debezium-heartbeat.<topic.prefix>); walbox's --heartbeat-interval
// keeps the slot moving with a logical decoding message and writes no
// record, which is said, since a consumer of that topic gets nothing. 0
// (Debezium's default: none) leaves walbox's own default.
func (t *translator) heartbeatInterval(c *Properties, v string) {
	key := "heartbeat.interval.ms"
	t.used[c][key] = true
	d, ok := millis(v)
	switch {
	case !ok:
		t.fail(c, key, "not a number of milliseconds", "give a number such as 10000, or 0")
	case d == "0s":
		t.mapped(c, key, "(default)", "Debezium sends no heartbeats; walbox keeps its own --heartbeat-interval (10s by default), which writes no records")
	default:
		t.setOption("heartbeat-interval", d, key)
		t.warn(c, key, "sets --heartbeat-interval, which keeps the slot moving like Debezium's heartbeats; "+
			"but walbox writes no heartbeat records, so Debezium's heartbeat topic (topic.heartbeat.prefix, __debezium-heartbeat by default, then the topic.prefix) receives nothing")
	}
}
