package bench

import (
	"bytes"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/walbox/walbox/internal/debeziumtest"
)

// TestDebeziumOptions checks the Connect set-up of --with-debezium: the
// benchmark's outbox columns routed as walbox routes them, the event id in
// the header the latency consumer joins on, the tuning the table prints,
// and a JVM run as a user runs it rather than with the test flags.
func TestDebeziumOptions(t *testing.T) {
	o := debeziumOptions("127.0.0.1:9092", 5432, debeziumSlot, "bench07-steady-debezium", "/tmp/x")
	if err := o.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	got := o.ConnectorProperties()
	for k, want := range map[string]string{
		"connector.class":                                     debeziumtest.ConnectorClass,
		"plugin.name":                                         "pgoutput",
		"database.port":                                       "5432",
		"database.dbname":                                     "postgres",
		"slot.name":                                           debeziumSlot,
		"publication.name":                                    Publication,
		"publication.autocreate.mode":                         "disabled",
		"table.include.list":                                  "public.outbox",
		"transforms":                                          "outbox",
		"transforms.outbox.type":                              debeziumtest.EventRouter,
		"transforms.outbox.table.field.event.id":              "id",
		"transforms.outbox.table.field.event.key":             "aggregate_id",
		"transforms.outbox.route.by.field":                    "aggregate_type",
		"transforms.outbox.route.topic.replacement":           "bench07-steady-debezium.${routedByValue}",
		"transforms.outbox.table.fields.additional.placement": "id:header:event_id",
		"key.converter":                                       debeziumtest.StringConverter,
		"value.converter":                                     debeziumtest.StringConverter,
		"poll.interval.ms":                                    "10",
		"max.batch.size":                                      "20480",
		"max.queue.size":                                      "81920",
		"producer.override.linger.ms":                         "5",
		"producer.override.batch.size":                        strconv.Itoa(walboxBatchMaxSize),
		"producer.override.compression.type":                  "snappy",
	} {
		if got[k] != want {
			t.Errorf("connector %s = %q, want %q", k, got[k], want)
		}
	}
	if o.Worker["offset.flush.interval.ms"] != "1000" || o.Worker["connector.client.config.override.policy"] != "All" {
		t.Errorf("worker = %v, want offset.flush.interval.ms=1000 and the override policy All (producer.override.* is rejected otherwise)", o.Worker)
	}
	if !slices.Contains(o.JVMArgs, "-Xmx1g") || slices.ContainsFunc(o.JVMArgs, func(a string) bool { return strings.Contains(a, "TieredStopAtLevel") }) {
		t.Errorf("JVMArgs = %v, want a 1 GiB heap and the full JIT", o.JVMArgs)
	}
	if o.Dir != "/tmp/x" {
		t.Errorf("Dir = %q, want the run's output directory", o.Dir)
	}
	// The topics the benchmark creates are the ones the router names.
	d := &debeziumRelay{prefix: "bench07-steady-debezium"}
	for _, topic := range d.Topics() {
		agg := strings.TrimPrefix(topic, d.prefix+".")
		if want := strings.ReplaceAll(got["transforms.outbox.route.topic.replacement"], "${routedByValue}", agg); want != topic {
			t.Errorf("topic %s, router sends %s events to %s", topic, agg, want)
		}
	}
}

// TestDebeziumSummary checks the walbox/Debezium ratios and that the
// printed table names how Debezium was set up.
func TestDebeziumSummary(t *testing.T) {
	r := &Runner{cfg: Config{WithDebezium: true}, res: &Results{
		Backlog: &BacklogResult{Events: 1000, Runs: []DrainRun{
			{Relay: walboxName, EventsPerSec: 80000, CPUMicrosPerEvent: 5, PeakRSSBytes: 30 << 20},
			{Relay: "ceiling", EventsPerSec: 100000},
			{Relay: debeziumName, EventsPerSec: 10000, CPUMicrosPerEvent: 75, PeakRSSBytes: 900 << 20},
		}},
		Steady: &SteadyResult{TargetRate: 2000, Runs: []SteadyRun{
			{Relay: walboxName, Events: 1000, CPUSeconds: 0.02, PeakRSSBytes: 20 << 20, Latency: LatencyStats{P50Ms: 4, P99Ms: 9}},
			{Relay: debeziumName, Error: "boom"},
		}},
	}}
	r.res.Debezium = r.debeziumSummary()
	rows := r.res.Debezium.Rows
	if len(rows) != 3 {
		t.Fatalf("rows = %+v, want the 3 backlog figures (the failed steady run has none)", rows)
	}
	if rows[0].Ratio != 8 || rows[1].Ratio != 5.0/75 || rows[2].Ratio != 30.0/900 {
		t.Errorf("ratios = %v, %v, %v; want 8, 1/15, 1/30", rows[0].Ratio, rows[1].Ratio, rows[2].Ratio)
	}
	var b bytes.Buffer
	printDebezium(&b, r.res)
	for _, want := range []string{"walbox/Debezium", "poll.interval.ms=10", "-Xmx1g", "8.000"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("printed table lacks %q:\n%s", want, b.String())
		}
	}
	if (&Runner{cfg: Config{}}).debeziumSummary() != nil {
		t.Error("a run without --with-debezium has a Debezium summary")
	}
}
