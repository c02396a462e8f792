package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/heartbeat"
)

// newHeartbeat builds the heartbeat monitor (--heartbeat-interval) on an
// ordinary connection; runRelay runs it next to the relay, which stops it
// and waits for it. It emits only while streaming() holds. Nil when the
// interval is 0.
func newHeartbeat(cfg config.Config, streaming func() bool, reg prometheus.Registerer, log *slog.Logger) (*heartbeat.Monitor, error) {
	if cfg.HeartbeatInterval <= 0 {
		return nil, nil
	}
	cc, err := cfg.ConnConfig()
	if err != nil {
		return nil, err
	}
	return heartbeat.New(cfg.HeartbeatInterval, cfg.Slot, cc, streaming, reg, log)
}
