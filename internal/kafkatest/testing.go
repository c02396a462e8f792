package kafkatest

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// RequireEnv names the environment variable that turns a machine unable to
// run a broker into a test failure instead of a skip. CI sets it so that
// integration tests cannot pass by not running.
const RequireEnv = "WALBOX_REQUIRE_INTEGRATION"

// BrokersEnv names the environment variable listing an existing cluster's
// seed brokers (host:port, comma-separated). When it is set, Start and
// Shared use that cluster instead of starting a broker; Options are then
// ignored and fault injection is impossible (CanFault is false).
const BrokersEnv = "KAFKA_BROKERS"

// WithAutoCreateTopics returns an option for Start that sets
// auto.create.topics.enable.
func WithAutoCreateTopics(v bool) func(*Options) {
	return func(o *Options) { o.AutoCreateTopics = Bool(v) }
}

// WithPartitions returns an option for Start that sets num.partitions.
func WithPartitions(n int) func(*Options) {
	return func(o *Options) { o.Partitions = n }
}

// WithMessageMaxBytes returns an option for Start that sets
// message.max.bytes.
func WithMessageMaxBytes(n int) func(*Options) {
	return func(o *Options) { o.MessageMaxBytes = n }
}

// WithProperty returns an option for Start that sets one server.properties
// property, e.g. WithProperty("log.retention.ms", "1000").
func WithProperty(name, value string) func(*Options) {
	return func(o *Options) {
		if o.ExtraProperties == nil {
			o.ExtraProperties = map[string]string{}
		}
		o.ExtraProperties[name] = value
	}
}

// startTimeout bounds classpath resolution plus startup in the test
// helpers. A first run on a machine with an empty ~/.m2 downloads about
// 40 MB of jars through Maven.
const startTimeout = 5 * time.Minute

// Start starts a broker for one test and closes it in t.Cleanup, logging the
// end of the broker log first if the test failed. If KAFKA_BROKERS is set it
// returns that cluster instead. When the machine cannot run a broker
// (ErrUnavailable) the test is skipped, unless WALBOX_REQUIRE_INTEGRATION=1,
// which makes it fail.
func Start(t testing.TB, opts ...func(*Options)) *Broker {
	t.Helper()
	if b := externalBroker(); b != nil {
		if len(opts) > 0 {
			t.Logf("kafkatest: using %s=%s; broker options are ignored", BrokersEnv, os.Getenv(BrokersEnv))
		}
		return b
	}
	var o Options
	for _, f := range opts {
		f(&o)
	}
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	b, err := StartBroker(ctx, o)
	if err != nil {
		skipOrFatal(t, err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("kafkatest: end of the broker log (%s):\n%s", b.LogPath(), b.LogTail(40))
		}
		if err := b.Close(); err != nil {
			t.Errorf("kafkatest: close broker: %v", err)
		}
	})
	return b
}

// RequireFaults skips t when the broker cannot be killed or restarted,
// i.e. when it is the external cluster of KAFKA_BROKERS; under
// WALBOX_REQUIRE_INTEGRATION=1 it fails t instead, saying why.
func (b *Broker) RequireFaults(t testing.TB) {
	t.Helper()
	if !b.CanFault() {
		SkipExternal(t, "this test kills or restarts the broker, which it cannot do to an external cluster")
	}
}

// SkipExternal skips t, which needs a broker of its own, because
// KAFKA_BROKERS names an external cluster; why says what the test needs.
// Under WALBOX_REQUIRE_INTEGRATION=1 it fails t instead: a required
// integration run must not pass by not running (CI never sets
// KAFKA_BROKERS).
func SkipExternal(t testing.TB, why string) {
	t.Helper()
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("kafkatest: %s is set and %s=1 forbids skipping: %s; unset %s so that kafkatest starts its own broker",
			BrokersEnv, RequireEnv, why, BrokersEnv)
	}
	t.Skipf("kafkatest: %s is set: %s (set %s=1 to fail instead)", BrokersEnv, why, RequireEnv)
}

func externalBroker() *Broker {
	env := os.Getenv(BrokersEnv)
	var addrs []string
	for _, a := range strings.Split(env, ",") {
		if a = strings.TrimSpace(a); a != "" {
			addrs = append(addrs, a)
		}
	}
	if len(addrs) == 0 {
		return nil
	}
	return &Broker{external: addrs}
}

func skipOrFatal(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) && os.Getenv(RequireEnv) != "1" {
		t.Skipf("skipping integration test (set %s=1 to fail instead): %v", RequireEnv, err)
	}
	t.Fatal(err)
}

// Shared is one broker shared by the tests of a package, started on first
// use; it saves a JVM start (about 2 s, 7 s without the CDS archive) per
// test. Tests sharing it should use their own topics and group names and
// must not Kill or Restart it. The zero value is ready to use; set Options
// before the first Broker call. Safe for concurrent use.
//
//	var shared kafkatest.Shared
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		shared.Close()
//		os.Exit(code)
//	}
type Shared struct {
	Options Options

	once sync.Once
	b    *Broker
	err  error
}

// Broker returns the shared broker, starting it on the first call (or
// wrapping KAFKA_BROKERS). It skips or fails t like Start when the broker
// cannot be started.
func (sh *Shared) Broker(t testing.TB) *Broker {
	t.Helper()
	sh.once.Do(func() {
		if sh.b = externalBroker(); sh.b != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		sh.b, sh.err = StartBroker(ctx, sh.Options)
	})
	if sh.err != nil {
		skipOrFatal(t, sh.err)
	}
	return sh.b
}

// Close closes the broker if it was started. Call it from TestMain after
// m.Run.
func (sh *Shared) Close() error {
	sh.once.Do(func() {}) // no broker may start after Close
	if sh.b == nil {
		return nil
	}
	return sh.b.Close()
}
