package debeziumtest

import (
	"errors"

	"github.com/walbox/walbox/internal/kafkatest"
)

// ErrUnavailable is wrapped by Start's errors when this machine cannot run
// Connect at all (no java, no mvn while the classpath is not cached, not
// Linux). It is kafkatest.ErrUnavailable, so one check covers both.
var ErrUnavailable = kafkatest.ErrUnavailable

// ErrStopTimeout is wrapped by Stop and Close when Connect did not finish
// a graceful stop in time and was killed instead. Connect is gone either
// way; only a test that needs the graceful stop's offset flush must fail
// on it.
var ErrStopTimeout = errors.New("debeziumtest: Connect did not stop in time and was killed")

// ErrClosed is returned by Restart after Close.
var ErrClosed = errors.New("debeziumtest: Connect is closed")

// errPortInUse marks a start that failed because another process took the
// REST port between the probe and the JVM's bind.
var errPortInUse = errors.New("port already in use")
