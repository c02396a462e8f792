package e2e

import (
	"context"
	"slices"
	"testing"

	"github.com/walbox/walbox/internal/faultproxy"
	"github.com/walbox/walbox/internal/kafkatest"
)

// faultScenario is one scenario of the fault suite (TestFaults).
type faultScenario struct {
	name string
	run  func(e *faultEnv) faultRow
}

// exactlyOnceFaults are the scenarios of TestFaults run a second time with
// --delivery exactly-once, where a duplicate fails too: every Kafka and
// Postgres fault (the slot must not move while Kafka cannot commit) and the
// graceful restart, about 110 s in all. Left out: the 20 random SIGKILLs,
// since TestExactlyOnceSurvivesSIGKILLs does 120.
var exactlyOnceFaults = []string{
	"kafka-sigkill",
	"kafka-unreachable",
	"kafka-connection-reset",
	"kafka-connection-stalled",
	"postgres-crash",
	"pg-connection-dropped",
	"pg-connection-blackholed",
	"sigterm-under-load",
}

// runExactlyOnceFaults runs the exactlyOnceFaults scenarios with walbox in
// exactly-once mode (walbox's default transaction bounds, the state in a
// topic of the scenario's own) and appends their rows, marked
// " (exactly-once)", to rows.
func runExactlyOnceFaults(ctx context.Context, t *testing.T, broker *kafkatest.Broker, kproxy *faultproxy.Proxy, scenarios []faultScenario, rows *[]faultRow) {
	for _, sc := range scenarios {
		if !slices.Contains(exactlyOnceFaults, sc.name) || ctx.Err() != nil {
			continue
		}
		if !t.Run(sc.name+"-exactly-once", func(t *testing.T) {
			name := sc.name + "-eos"
			e := newFaultEnv(ctx, t, broker, kproxy, name, eosEnv("walbox-state."+name, 0)...)
			e.exactlyOnce = true
			row := sc.run(e)
			row.scenario += exactlyOnceSuffix
			*rows = append(*rows, row)
		}) && ctx.Err() != nil {
			return
		}
	}
}
