package bench

import "time"

// procRelay is a relay run as its own process (walbox, Debezium's Connect
// JVM): its CPU time and peak RSS are read from /proc.
type procRelay interface {
	Relay
	// PeakRSS is the process's VmHWM so far, in bytes; call it before Stop.
	PeakRSS() (int64, error)
	// CPU is the CPU time the process used since it was ready to relay.
	CPU() (time.Duration, error)
}

// readyRelay is a relay whose Start returns only once it is ready to relay
// after a start-up that is no part of the work measured (a JVM loading its
// classes): a drain's clock starts at ReadyAt, and a steady run's warm-up
// lasts Warmup.
type readyRelay interface {
	ReadyAt() time.Time
	Warmup() time.Duration
}

var (
	_ procRelay  = (*walboxProc)(nil)
	_ procRelay  = (*debeziumRelay)(nil)
	_ readyRelay = (*debeziumRelay)(nil)
)

// CPU is the walbox process's CPU time; it starts in milliseconds, so its
// start-up is counted.
func (w *walboxProc) CPU() (time.Duration, error) { return processCPU(w.PID()) }

// relayCPU returns rel's CPU time if it runs as its own process, else -1.
func relayCPU(rel Relay) time.Duration {
	if p, ok := rel.(procRelay); ok {
		if cpu, err := p.CPU(); err == nil {
			return cpu
		}
	}
	return -1
}
