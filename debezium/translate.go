package debezium

import (
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/walbox/walbox/debezium/eventrouter"
)

// Class names Translate accepts.
const (
	ConnectorClass   = "io.debezium.connector.postgresql.PostgresConnector"
	EventRouterClass = "io.debezium.transforms.outbox.EventRouter"

	stringConverterClass    = "org.apache.kafka.connect.storage.StringConverter"
	jsonConverterClass      = "org.apache.kafka.connect.json.JsonConverter"
	byteArrayConverterClass = "org.apache.kafka.connect.converters.ByteArrayConverter"
	simpleHeaderConverter   = "org.apache.kafka.connect.storage.SimpleHeaderConverter"
	// cloudEventsConverterClass is refused by name: see converter.
	cloudEventsConverterClass = "io.debezium.converters.CloudEventsConverter"
)

// Debezium's defaults that walbox applies when the key is absent.
const (
	DefaultSlot        = "debezium"
	DefaultPublication = "dbz_publication"
)

// Accepted values of publication.autocreate.mode.
const (
	AutocreateAllTables = "all_tables"
	AutocreateDisabled  = "disabled"
	AutocreateFiltered  = "filtered"
	AutocreateNoTables  = "no_tables"
)

// OptionValue is a walbox option (by flag name, without dashes) with the
// value the Debezium configuration gives it, in the option's text form,
// and the Debezium keys it comes from.
type OptionValue struct {
	Flag  string
	Value string
	Keys  []string
}

// Mapping is one Debezium key and what walbox makes of it, for `walbox
// config check` and the log.
type Mapping struct {
	Key   string
	Where string
	// Value is the key's value with secrets replaced by "xxxxx".
	Value string
	// Setting is what it sets: a walbox option ("--pg-dsn"), an
	// EventRouter setting ("eventrouter.EventIDColumn"), or "(warning)".
	Setting string
	Note    string
}

// Translation is a Debezium configuration in walbox's terms.
type Translation struct {
	// Options are the walbox options the configuration sets, in a stable
	// order; config applies them below explicit flags, environment
	// variables and the YAML file.
	Options []OptionValue
	// Router is the EventRouter and converter configuration.
	Router eventrouter.Config
	// AutocreateMode is publication.autocreate.mode (default all_tables).
	AutocreateMode string
	// Mappings lists every key read, in file order (connector, then worker).
	Mappings []Mapping
	// Warnings are keys accepted although walbox does not apply them as
	// Debezium does: most have no effect on the records; each says why,
	// and what walbox does instead.
	Warnings []Problem
	// OffsetsFile and OffsetsTopic are the worker's
	// offset.storage.file.filename and offset.storage.topic, for walbox
	// migrate-from-debezium; "" when not set.
	OffsetsFile, OffsetsTopic string
}

// Option returns the value the translation gives a walbox option.
func (t *Translation) Option(flag string) (string, bool) {
	for _, o := range t.Options {
		if o.Flag == flag {
			return o.Value, true
		}
	}
	return "", false
}

// Translate reads a connector configuration and, optionally (nil), the
// Connect worker's, and returns walbox's equivalent. Every key of the
// connector is mapped, warned about (no effect on the records) or
// reported; all keys walbox cannot honour are returned at once in an
// *UnsupportedError (matching ErrUnsupported). The Translation is returned
// with the error too (nil only when connector is nil), so that config
// check can show what was understood.
func Translate(connector, worker *Properties) (*Translation, error) {
	if connector == nil {
		return nil, fmt.Errorf("debezium: no connector configuration")
	}
	t := &translator{
		conn: connector, worker: worker,
		used: map[*Properties]map[string]bool{connector: {}, worker: {}},
		out:  &Translation{Router: eventrouter.Defaults()},
	}
	t.translate()
	sort.SliceStable(t.out.Mappings, func(i, j int) bool { return t.order(t.out.Mappings[i]) < t.order(t.out.Mappings[j]) })
	if len(t.problems) > 0 {
		return t.out, &UnsupportedError{Problems: t.problems}
	}
	return t.out, nil
}

type translator struct {
	conn, worker *Properties
	used         map[*Properties]map[string]bool
	out          *Translation
	problems     []Problem
	// dsn collects the libpq key=value pairs in a fixed order.
	dsn []string
	// registry is the first schema registry converter's connection.
	registry *registryConn
}

// order sorts mappings by file, then line, then key.
func (t *translator) order(m Mapping) string {
	file := "0"
	if t.worker != nil && strings.HasPrefix(m.Where, t.worker.Source) && t.worker.Source != t.conn.Source {
		file = "1"
	}
	line := 0
	if i := strings.LastIndexByte(m.Where, ':'); i >= 0 {
		line, _ = strconv.Atoi(m.Where[i+1:])
	}
	return fmt.Sprintf("%s%08d%s", file, line, m.Key)
}

// get reads a key and marks it as handled.
func (t *translator) get(p *Properties, key string) (string, bool) {
	if p == nil {
		return "", false
	}
	v, ok := p.Get(key)
	if ok {
		t.used[p][key] = true
	}
	return strings.TrimSpace(v), ok
}

func (t *translator) mapped(p *Properties, key, setting, note string) {
	v, _ := p.Get(key)
	t.out.Mappings = append(t.out.Mappings, Mapping{Key: key, Where: p.Where(key), Value: redact(key, v), Setting: setting, Note: note})
}

func (t *translator) warn(p *Properties, key, why string) {
	t.used[p][key] = true
	v, _ := p.Get(key)
	t.out.Warnings = append(t.out.Warnings, Problem{Key: key, Where: p.Where(key), Value: redact(key, v), Why: why})
	t.out.Mappings = append(t.out.Mappings, Mapping{Key: key, Where: p.Where(key), Value: redact(key, v), Setting: "(warning)", Note: why})
}

func (t *translator) fail(p *Properties, key, why, fix string) {
	where, value := "", ""
	if p != nil {
		t.used[p][key] = true
		where = p.Where(key)
		if v, ok := p.Get(key); ok {
			value = redact(key, v)
		}
	}
	t.problems = append(t.problems, Problem{Key: key, Where: where, Value: value, Why: why, Fix: fix})
	if p != nil {
		t.out.Mappings = append(t.out.Mappings, Mapping{Key: key, Where: where, Value: value, Setting: "(unsupported)", Note: why})
	}
}

func (t *translator) setOption(flag, value string, keys ...string) {
	for i, o := range t.out.Options {
		if o.Flag == flag {
			t.out.Options[i].Value = value
			t.out.Options[i].Keys = append(t.out.Options[i].Keys, keys...)
			return
		}
	}
	t.out.Options = append(t.out.Options, OptionValue{Flag: flag, Value: value, Keys: keys})
}

// redact hides secret values: the whole value of a key that holds a
// secret (passwords, JAAS configs, tokens, the USER:PASSWORD of a Schema
// Registry's *.basic.auth.user.info), and the user information of any URL
// in other values (a registry URL https://USER:PASSWORD@host).
func redact(key, v string) string {
	k := strings.ToLower(key)
	for _, s := range []string{"password", "jaas.config", "secret", "token", "keystore.key", "credentials", "user.info", "userinfo"} {
		if strings.Contains(k, s) && v != "" {
			return "xxxxx"
		}
	}
	return urlUserinfoRE.ReplaceAllString(v, "${1}xxxxx@")
}

// urlUserinfoRE matches the scheme and user information of a URL
// (scheme://USERINFO@), in a value that may list several.
var urlUserinfoRE = regexp.MustCompile(`([A-Za-z][A-Za-z0-9+.-]*://)[^/?#@\s,]+@`)

func (t *translator) translate() {
	t.connectorClass()
	t.database()
	t.replication()
	t.tables()
	t.identity()
	t.transforms()
	t.converters()
	t.producer()
	t.knownConnectorKeys()
	t.workerKeys()
	t.leftovers()
}

func (t *translator) connectorClass() {
	c := t.conn
	v, ok := t.get(c, "connector.class")
	switch {
	case !ok:
		t.fail(nil, "connector.class", "missing", "set connector.class="+ConnectorClass)
	case v == ConnectorClass || v == "PostgresConnector": // Connect accepts the simple name as an alias
		t.mapped(c, "connector.class", "(checked)", "Debezium's Postgres connector: walbox's own source")
	default:
		t.fail(c, "connector.class", "walbox replaces only Debezium's Postgres connector", "use a configuration of "+ConnectorClass)
	}
}

func msDuration(n int64) time.Duration { return time.Duration(n) * time.Millisecond }

// tableRE is a table.include.list entry walbox takes as a literal name:
// identifier characters and an escaped or unescaped dot between schema
// and table (Debezium matches the whole "schema.table", so an unescaped
// dot can only match the separator). A leading ^ and trailing $ are
// dropped before matching: Debezium anchors the pattern anyway.
var tableRE = regexp.MustCompile(`^([A-Za-z0-9_$]+)(?:\\\.|\.)([A-Za-z0-9_$]+)$`)

// tables maps table.include.list.
func (t *translator) tables() {
	c := t.conn
	v, ok := t.get(c, "table.include.list")
	if !ok || strings.TrimSpace(v) == "" {
		if _, old := t.get(c, "table.whitelist"); old {
			t.fail(c, "table.whitelist", "removed in Debezium 2.0", "rename it table.include.list")
			return
		}
		t.fail(nil, "table.include.list", "missing: Debezium would capture every table, walbox streams only outbox tables",
			"list the outbox tables, comma-separated, such as table.include.list=public.outbox")
		return
	}
	var tables, bad []string
	for _, p := range strings.Split(v, ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		m := tableRE.FindStringSubmatch(strings.TrimSuffix(strings.TrimPrefix(p, "^"), "$"))
		if m == nil {
			bad = append(bad, p)
			continue
		}
		tables = append(tables, m[1]+"."+m[2])
	}
	if len(bad) > 0 {
		t.fail(c, "table.include.list", fmt.Sprintf("%s %s not a plain schema.table name (walbox does not match tables by regular expression)",
			strings.Join(quoteAll(bad), ", "), plural(len(bad), "is", "are")),
			"list each outbox table by name, qualified by its schema, such as public.outbox")
		return
	}
	t.out.Router.Tables = tables
	t.setOption("table", strings.Join(tables, ","), "table.include.list")
	t.mapped(c, "table.include.list", "--table", "one slot and publication for all of them")
	for _, k := range []string{"table.exclude.list", "schema.include.list", "schema.exclude.list", "table.blacklist", "schema.whitelist", "schema.blacklist",
		"column.include.list", "column.exclude.list", "column.whitelist", "column.blacklist"} {
		if v, ok := t.get(c, k); ok && strings.TrimSpace(v) != "" {
			t.fail(c, k, "walbox selects outbox tables and columns only by table.include.list and the EventRouter's column names",
				"remove it (and list the outbox tables in table.include.list)")
		}
	}
}

func quoteAll(s []string) []string {
	out := make([]string, len(s))
	for i, x := range s {
		out[i] = strconv.Quote(x)
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// identity maps name, topic.prefix and extended.headers.enabled.
func (t *translator) identity() {
	c := t.conn
	if v, ok := t.get(c, "name"); ok && v != "" {
		t.out.Router.ConnectorName = v
		t.mapped(c, "name", "eventrouter.ConnectorName", "also the connector's offsets key for migrate-from-debezium")
	}
	if v, ok := t.get(c, "topic.prefix"); ok && v != "" {
		t.out.Router.LogicalName = v
		t.mapped(c, "topic.prefix", "eventrouter.LogicalName", "the __debezium.context.connectorLogicalName header and the offsets key")
	} else {
		t.fail(nil, "topic.prefix", "missing (Debezium requires it)", "set topic.prefix to the connector's logical name")
	}
	if v, ok := t.get(c, "extended.headers.enabled"); ok {
		b, err := strconv.ParseBool(v)
		if err != nil {
			t.fail(c, "extended.headers.enabled", "not a boolean", "use true or false")
		} else {
			t.out.Router.ExtendedHeaders = b
			t.mapped(c, "extended.headers.enabled", "eventrouter.ExtendedHeaders", "")
		}
	}
}
