package kafkatest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Options configures StartBroker. The zero value is ready to use.
type Options struct {
	// AutoCreateTopics sets auto.create.topics.enable. Nil means true, so a
	// Metadata request or a produce for an unknown topic creates it with
	// Partitions partitions. Point it at false to test missing topics.
	AutoCreateTopics *bool

	// Partitions sets num.partitions: the partition count of auto-created
	// topics and of CreateTopics requests that leave it to the broker (-1).
	// Zero means 3, so that per-partition ordering is exercised by default.
	Partitions int

	// MessageMaxBytes sets message.max.bytes, the largest record batch the
	// broker accepts. Zero keeps Kafka's default, 1048588.
	MessageMaxBytes int

	// ExtraProperties are written to server.properties after the defaults
	// (see serverProperties) and override them. Properties that fix the
	// broker's identity, listeners and directories are owned by kafkatest
	// and rejected by Validate; keys may not contain whitespace, '=', ':' or
	// '#', and values may not contain newlines.
	ExtraProperties map[string]string

	// JVMArgs are appended to the default JVM flags (jvmDefaults); the JVM
	// takes the last of conflicting flags, so "-Xmx1g" raises the heap.
	JVMArgs []string

	// Java is the java executable (17 or newer). Empty means
	// $JAVA_HOME/bin/java, else java on PATH.
	Java string

	// Maven is the mvn executable, run only when the classpath is not cached.
	// Empty means mvn on PATH.
	Maven string

	// Pom is the Maven project naming the broker's jars. Empty means
	// $WALBOX_KAFKA_POM, else e2e/kafka/pom.xml in the working directory or
	// the nearest parent that has one.
	Pom string

	// CacheDir holds the resolved classpaths and class-data-sharing archives.
	// Empty means $WALBOX_KAFKA_CACHE, else os.UserCacheDir()/walbox (or
	// os.TempDir()/walbox when there is no user cache dir, e.g. no $HOME).
	CacheDir string

	// DisableCDS turns off the class-data-sharing archive (see the package
	// doc): no archive is read or written.
	DisableCDS bool

	// Advertise, when set, is called with the broker's own host:port once
	// its port is chosen (again on each retry of a port clash) and returns
	// the address the broker advertises to clients instead. The fault suite
	// points it at a faultproxy forwarding to that address, so that every
	// connection a client makes after its first metadata request crosses
	// the proxy.
	Advertise func(brokerAddr string) string

	// SASLSSL, when set, adds a SASL_SSL listener (saslssl.go).
	SASLSSL *SASLSSL
}

// Bool returns a pointer to v, for Options.AutoCreateTopics.
func Bool(v bool) *bool { return &v }

// defaultPartitions is num.partitions when Options.Partitions is zero.
const defaultPartitions = 3

// ownedProperties are set by kafkatest from the ports and directories it
// chose; overriding them would break the harness rather than the test.
var ownedProperties = []string{
	"process.roles",
	"node.id",
	"listeners",
	"advertised.listeners",
	"controller.listener.names",
	"controller.quorum.bootstrap.servers",
	"controller.quorum.voters",
	"inter.broker.listener.name",
	"listener.security.protocol.map",
	"log.dir",
	"log.dirs",
	"metadata.log.dir",
}

// Validate reports options StartBroker cannot honour.
func (o Options) Validate() error {
	if o.Partitions < 0 {
		return fmt.Errorf("kafkatest: Partitions = %d, want >= 0 (0 means %d)", o.Partitions, defaultPartitions)
	}
	if o.MessageMaxBytes < 0 {
		return fmt.Errorf("kafkatest: MessageMaxBytes = %d, want >= 0 (0 means Kafka's default)", o.MessageMaxBytes)
	}
	if err := o.SASLSSL.validate(); err != nil {
		return err
	}
	for k, v := range o.ExtraProperties {
		if k == "" || strings.ContainsAny(k, " \t\r\n\f=:#!\\") {
			return fmt.Errorf("kafkatest: ExtraProperties: invalid property name %q", k)
		}
		if slices.Contains(ownedProperties, k) {
			return fmt.Errorf("kafkatest: ExtraProperties: %s is set by kafkatest and cannot be overridden", k)
		}
		if strings.ContainsAny(v, "\r\n\x00") {
			return fmt.Errorf("kafkatest: ExtraProperties: %s: value contains a newline or NUL", k)
		}
	}
	return nil
}

// serverProperties returns the broker's configuration: a single node that is
// both broker and controller, listening on 127.0.0.1 only, with every
// internal topic at replication factor 1 and the group rebalance delay off so
// consumers start at once.
//
// The internal topics get one partition instead of 50: creating
// __consumer_offsets and __transaction_state with 50 partitions each costs
// seconds on a 2-core machine, and a single broker coordinates every group
// and transaction anyway.
func (o Options) advertised(broker string) string {
	if o.Advertise != nil {
		return o.Advertise(broker)
	}
	return broker
}

func (o Options) serverProperties(brokerPort, controllerPort int, dataDir string) map[string]string {
	broker := "127.0.0.1:" + strconv.Itoa(brokerPort)
	controller := "127.0.0.1:" + strconv.Itoa(controllerPort)
	autoCreate := o.AutoCreateTopics == nil || *o.AutoCreateTopics
	partitions := o.Partitions
	if partitions == 0 {
		partitions = defaultPartitions
	}
	p := map[string]string{
		"process.roles": "broker,controller",
		"node.id":       "1",
		// A static quorum (not --standalone's dynamic one, which records
		// the controller's endpoint in the formatted storage): the storage
		// is then the same for every port, formatted once per process
		// (format.go).
		"controller.quorum.voters":       "1@" + controller,
		"listeners":                      "PLAINTEXT://" + broker + ",CONTROLLER://" + controller,
		"advertised.listeners":           "PLAINTEXT://" + o.advertised(broker),
		"controller.listener.names":      "CONTROLLER",
		"inter.broker.listener.name":     "PLAINTEXT",
		"listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
		"log.dirs":                       dataDir,

		"auto.create.topics.enable":                        strconv.FormatBool(autoCreate),
		"num.partitions":                                   strconv.Itoa(partitions),
		"default.replication.factor":                       "1",
		"min.insync.replicas":                              "1",
		"offsets.topic.replication.factor":                 "1",
		"offsets.topic.num.partitions":                     "1",
		"transaction.state.log.replication.factor":         "1",
		"transaction.state.log.min.isr":                    "1",
		"transaction.state.log.num.partitions":             "1",
		"share.coordinator.state.topic.replication.factor": "1",
		"share.coordinator.state.topic.min.isr":            "1",
		"group.initial.rebalance.delay.ms":                 "0",
		// After Kill, the restarted controller refuses the broker's new
		// registration (DUPLICATE_BROKER_REGISTRATION) until the killed
		// incarnation's session expires: 9 s by default, retried every 2 s,
		// so a Restart took 12-14 s. A 500 ms heartbeat against a 4 s
		// session brings it to about 6 s and still allows 8 missed
		// heartbeats before a busy machine fences the only broker.
		"broker.session.timeout.ms":    "4000",
		"broker.heartbeat.interval.ms": "500",
		// Two cores: Kafka's defaults (3 network, 8 I/O threads) only add
		// memory and context switches.
		"num.network.threads":               "2",
		"num.io.threads":                    "2",
		"num.recovery.threads.per.data.dir": "1",
	}
	if o.MessageMaxBytes > 0 {
		p["message.max.bytes"] = strconv.Itoa(o.MessageMaxBytes)
	}
	maps.Copy(p, o.ExtraProperties)
	return p
}

// renderProperties formats p as a Java properties file, keys sorted.
// Backslash is the escape character of that format; Validate has ruled out
// every other character that would need escaping.
func renderProperties(p map[string]string) string {
	var b strings.Builder
	b.WriteString("# Written by walbox internal/kafkatest.\n")
	for _, k := range slices.Sorted(maps.Keys(p)) {
		b.WriteString(k)
		b.WriteByte('=')
		b.WriteString(strings.ReplaceAll(p[k], `\`, `\\`))
		b.WriteByte('\n')
	}
	return b.String()
}

// log4jConfig sends the broker's log to logPath, appending across restarts,
// rather than to stdout.
func log4jConfig(logPath string) string {
	return `# Written by walbox internal/kafkatest.
status = warn
appender.file.type = File
appender.file.name = FILE
appender.file.fileName = ` + strings.ReplaceAll(logPath, `\`, `\\`) + `
appender.file.append = true
appender.file.layout.type = PatternLayout
appender.file.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.file.ref = FILE
`
}
