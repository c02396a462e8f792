package main

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/walbox/walbox/pipeline"
)

// relayState is the part of *pipeline.Relay /readyz uses.
type relayState interface {
	Standby() bool
	Streaming() bool
}

var _ relayState = (*pipeline.Relay)(nil)

// kafkaPinger is the part of *kgo.Client /readyz uses.
type kafkaPinger interface {
	Ping(ctx context.Context) error
}

// healthz answers 200 as long as the process serves HTTP: a liveness probe
// that restarts walbox only when it is wedged, never while it waits as a
// standby or reconnects.
func healthz(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "alive")
}

// readyz answers 200 only while the relay streams from the slot and a Kafka
// broker answers a ping; 503 with the reason while standby, connecting,
// reconnecting, or Kafka is unreachable.
func readyz(relay relayState, kafka kafkaPinger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		notReady := func(reason string) {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready: "+reason)
		}
		switch {
		case relay.Standby():
			notReady("standby: another instance holds the slot")
			return
		case !relay.Streaming():
			notReady("not streaming: connecting to postgres or retrying")
			return
		}
		if kafka != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
			defer cancel()
			if err := kafka.Ping(ctx); err != nil {
				notReady("kafka unreachable: " + err.Error())
				return
			}
		}
		fmt.Fprintln(w, "streaming")
	}
}
