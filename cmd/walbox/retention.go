package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/walbox/walbox/config"
	"github.com/walbox/walbox/pipeline"
	"github.com/walbox/walbox/retention"
)

// newKeeper builds the keeper of the trailing slot (--replay-window), fed
// with the positions the relay confirms; runRelay runs it next to the
// relay, which stops it and waits for it. Nil when the window is 0.
func newKeeper(cfg config.Config, relay *pipeline.Relay, reg prometheus.Registerer, log *slog.Logger) (*retention.Keeper, error) {
	if cfg.ReplayWindow <= 0 {
		return nil, nil
	}
	cc, err := cfg.ConnConfig()
	if err != nil {
		return nil, err
	}
	return retention.New(retention.Config{Slot: cfg.Slot, ReplaySlot: cfg.ReplaySlot, Window: cfg.ReplayWindow, Publication: cfg.Publication,
		Rewound: relay.HistoryRewound},
		cc, relay.Confirmed, reg, log)
}

// replaySlotInUse is the trailing slot walbox run keeps, "" when
// --replay-window is 0: setup warns about the others it made.
func replaySlotInUse(cfg config.Config) string {
	if cfg.ReplayWindow <= 0 {
		return ""
	}
	return cfg.ReplaySlotName()
}
