package kafkatest

import (
	"errors"
	"strings"
)

// ErrUnavailable is wrapped by the errors of StartBroker when this machine
// cannot run a broker at all: no java, no mvn while the classpath is not yet
// cached, or an OS other than Linux. Start turns it into a skip (or a failure
// when WALBOX_REQUIRE_INTEGRATION=1).
var ErrUnavailable = errors.New("kafkatest: Kafka test broker unavailable")

// ErrExternalBroker is returned by Kill, Stop and Restart of a Broker that
// wraps KAFKA_BROKERS: kafkatest does not own that broker's process. Tests
// that inject faults call RequireFaults (or check CanFault) first.
var ErrExternalBroker = errors.New("kafkatest: the broker is external (KAFKA_BROKERS) and cannot be killed, stopped or restarted")

// ErrNotRunning is returned by Kill when the broker is already stopped or
// killed; Restart it first.
var ErrNotRunning = errors.New("kafkatest: the broker is not running")

// ErrClosed is returned by Kill, Stop and Restart after Close.
var ErrClosed = errors.New("kafkatest: the broker is closed")

// errPortInUse marks a start that failed because another process took one of
// our ports between the probe and the JVM's bind.
var errPortInUse = errors.New("port already in use")

// StartError is returned when a broker JVM (or the storage formatter before
// it) fails to start or to become ready. It carries the end of the broker's
// logs, which almost always names the cause.
type StartError struct {
	// Op is the step that failed: "format", "start" or "restart".
	Op string
	// Addr is the broker's listener, host:port.
	Addr string
	// Err is the cause: the JVM's exit status, ctx's error, or the last
	// Metadata error.
	Err error
	// LogTail is the end of the broker log and of the JVM's own output.
	LogTail string
}

func (e *StartError) Error() string {
	var b strings.Builder
	b.WriteString("kafkatest: ")
	b.WriteString(e.Op)
	b.WriteString(" broker ")
	b.WriteString(e.Addr)
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	if e.LogTail != "" {
		b.WriteString("\n")
		b.WriteString(e.LogTail)
	}
	return b.String()
}

func (e *StartError) Unwrap() error { return e.Err }
