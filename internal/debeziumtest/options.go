package debeziumtest

import (
	"fmt"
	"slices"

	"github.com/walbox/walbox/internal/kafkatest"
)

// Options configures Start. Bootstrap and PG.Port and PG.DBName are
// required.
type Options struct {
	// Name is the connector's name (the `name` property, the key of its
	// offsets). Empty means DefaultName.
	Name string

	// Bootstrap is the worker's bootstrap.servers, e.g. broker.Addr().
	Bootstrap string

	// PG is the database Debezium streams from.
	PG PG

	// Connector is merged over DefaultConnectorProperties: a key with an
	// empty value removes the default, any other value replaces or adds it
	// (e.g. "transforms.outbox.route.by.field": "type").
	Connector map[string]string

	// Worker is merged the same way over the standalone worker's defaults
	// (bootstrap.servers, StringConverter, offset.flush.interval.ms=1000,
	// plugin.discovery=only_scan). listeners, offset.storage.file.filename
	// and plugin.path are set by Start and cannot be overridden.
	Worker map[string]string

	// JVMArgs replace TestJVMArgs when not nil; the benchmark runs Connect
	// as a user would, with a larger heap and the full JIT.
	JVMArgs []string

	// Dir holds the properties, the offsets file and the logs; Start
	// creates it if needed and Close leaves it. Empty means a new temporary
	// directory, removed by Close.
	Dir string

	// Java, Maven, Pom and CacheDir locate the tools and jars. Empty means
	// kafkatest's defaults for java, mvn and the cache directory, and
	// $WALBOX_DEBEZIUM_POM or e2e/debezium/pom.xml in the working directory
	// or its nearest parent that has one.
	Java, Maven, Pom, CacheDir string
}

// TestJVMArgs returns the JVM flags Connect runs with unless Options.JVMArgs
// is set: kafkatest's fast-startup flags (C1 only, SerialGC) with a smaller
// heap, 384 MiB, which a connector moving thousands of small records never
// fills.
func TestJVMArgs() []string {
	return append(kafkatest.JVMDefaults(), "-Xms64m", "-Xmx384m")
}

// Validate reports options Start cannot honour.
func (o Options) Validate() error {
	if o.Bootstrap == "" {
		return fmt.Errorf("debeziumtest: Options.Bootstrap is empty: set it to the broker's host:port (kafkatest Broker.Addr)")
	}
	if o.PG.Port <= 0 || o.PG.Port > 65535 {
		return fmt.Errorf("debeziumtest: Options.PG.Port = %d: set it to the server's port (pgtest Server.Port)", o.PG.Port)
	}
	if o.PG.DBName == "" {
		return fmt.Errorf("debeziumtest: Options.PG.DBName is empty: name the database holding the outbox table")
	}
	if err := validateProperties("Options.Connector", o.Connector); err != nil {
		return err
	}
	if err := validateProperties("Options.Worker", o.Worker); err != nil {
		return err
	}
	for k := range o.Worker {
		if slices.Contains(ownedWorkerProperties, k) {
			return fmt.Errorf("debeziumtest: Options.Worker: %s is set by debeziumtest and cannot be overridden", k)
		}
	}
	if v, ok := o.Connector["name"]; ok && v != o.name() {
		return fmt.Errorf("debeziumtest: Options.Connector sets name=%q: set Options.Name instead", v)
	}
	return nil
}

func (o Options) name() string {
	if o.Name == "" {
		return DefaultName
	}
	return o.Name
}

// ConnectorProperties returns the connector properties Start writes for o:
// DefaultConnectorProperties merged with o.Connector. A test can hand them
// to walbox (--debezium-config) before or without starting Connect.
func (o Options) ConnectorProperties() map[string]string {
	return merge(DefaultConnectorProperties(o.name(), o.PG), o.Connector)
}
