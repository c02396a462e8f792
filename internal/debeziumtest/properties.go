package debeziumtest

import (
	"fmt"
	"maps"
	"strconv"
	"strings"

	"github.com/walbox/walbox/internal/kafkatest"
)

// Class names the defaults refer to.
const (
	ConnectorClass  = "io.debezium.connector.postgresql.PostgresConnector"
	EventRouter     = "io.debezium.transforms.outbox.EventRouter"
	StringConverter = "org.apache.kafka.connect.storage.StringConverter"
	JSONConverter   = "org.apache.kafka.connect.json.JsonConverter"
)

// Defaults of Options.
const (
	DefaultName        = "walbox-debezium"
	DefaultSlot        = "debezium"
	DefaultPublication = "dbz_publication"
	DefaultTable       = "public.outbox"
	DefaultTopicPrefix = "walbox"
)

// PG says where Debezium connects: the database.* connector properties.
type PG struct {
	Host     string // default 127.0.0.1
	Port     int    // required
	User     string // default postgres
	Password string // may be empty (pgtest trusts local connections)
	DBName   string // required
}

// DefaultConnectorProperties returns the connector properties Start uses
// before Options.Connector is merged over them: Debezium's Postgres
// connector on pgoutput, slot "debezium" and publication "dbz_publication"
// created for the outbox table only (publication.autocreate.mode=filtered,
// table.include.list=public.outbox), no initial snapshot (an outbox relay
// streams what is committed after it starts, as walbox does), the Outbox
// Event Router as transform "outbox" with its defaults (topic
// outbox.event.<aggregatetype>, key aggregateid, value payload, header id),
// and StringConverter for keys and values.
func DefaultConnectorProperties(name string, pg PG) map[string]string {
	if name == "" {
		name = DefaultName
	}
	host, user := pg.Host, pg.User
	if host == "" {
		host = "127.0.0.1"
	}
	if user == "" {
		user = "postgres"
	}
	return map[string]string{
		"name":                        name,
		"connector.class":             ConnectorClass,
		"tasks.max":                   "1",
		"database.hostname":           host,
		"database.port":               strconv.Itoa(pg.Port),
		"database.user":               user,
		"database.password":           pg.Password,
		"database.dbname":             pg.DBName,
		"topic.prefix":                DefaultTopicPrefix,
		"plugin.name":                 "pgoutput",
		"slot.name":                   DefaultSlot,
		"publication.name":            DefaultPublication,
		"publication.autocreate.mode": "filtered",
		"table.include.list":          DefaultTable,
		"snapshot.mode":               "no_data",
		"transforms":                  "outbox",
		"transforms.outbox.type":      EventRouter,
		"key.converter":               StringConverter,
		"value.converter":             StringConverter,
	}
}

// ownedWorkerProperties are set by Start from the ports and files it chose.
var ownedWorkerProperties = []string{"listeners", "offset.storage.file.filename", "plugin.path"}

// defaultWorkerProperties returns the standalone worker's configuration
// before Options.Worker is merged over it. offset.flush.interval.ms is one
// second instead of Connect's minute, so that a test sees offsets written
// soon after the events; Stop flushes them anyway.
func defaultWorkerProperties(bootstrap, restAddr, offsetsFile string) map[string]string {
	return map[string]string{
		"bootstrap.servers":            bootstrap,
		"key.converter":                StringConverter,
		"value.converter":              StringConverter,
		"offset.storage.file.filename": offsetsFile,
		"offset.flush.interval.ms":     "1000",
		"listeners":                    "http://" + restAddr,
		// Everything is on the classpath: scanning it is all the
		// discovery there is to do.
		"plugin.discovery": "only_scan",
	}
}

// merge returns base with over applied: a key with an empty value in over
// removes the key, any other value replaces or adds it.
func merge(base, over map[string]string) map[string]string {
	out := maps.Clone(base)
	for k, v := range over {
		if v == "" {
			delete(out, k)
			continue
		}
		out[k] = v
	}
	return out
}

// validateProperties checks that props can be written to a .properties
// file as they are; what names the map in the error.
func validateProperties(what string, props map[string]string) error {
	for k, v := range props {
		if k == "" || strings.ContainsAny(k, " \t\r\n\f=:#!\\") {
			return fmt.Errorf("debeziumtest: %s: invalid property name %q: use a name without whitespace, '=', ':', '#', '!' or '\\'", what, k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("debeziumtest: %s: %s: value contains a newline or NUL", what, k)
		}
	}
	return nil
}

// log4jConfig sends Connect's log to logPath, without the classpath
// scanner's warnings about jars it cannot read.
func log4jConfig(logPath string) string {
	return kafkatest.Log4jConfig(logPath) + `logger.reflections.name = org.reflections
logger.reflections.level = ERROR
`
}
