package bench

import (
	"strings"
	"testing"

	"github.com/walbox/walbox/schemareg"
)

// TestAvroSchemaFitsThePayloads: the generator's payloads encode with the
// Avro runs' schemas (else the Avro drain would measure invalid rows).
func TestAvroSchemaFitsThePayloads(t *testing.T) {
	reg := startRegistry()
	defer reg.Close()
	if err := reg.register("p"); err != nil {
		t.Fatal(err)
	}
	cl, err := schemareg.NewClient(schemareg.ClientConfig{URLs: []string{reg.URL()}})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := schemareg.NewEncoder(schemareg.Config{Format: schemareg.FormatAvro}, cl, nil)
	if err != nil {
		t.Fatal(err)
	}
	g := newGenerator(1, 10)
	var r row
	for i := range 50 {
		g.next(int64(i+1), &r)
		if _, err := enc.EncodeValue(nil, "p."+r.aggType, r.payload); err != nil {
			t.Fatalf("payload %s: %v", r.payload, err)
		}
	}
	if n := reg.requests.Load(); n > 2+2 { // two registrations, two reads
		t.Errorf("%d registry requests for two subjects", n)
	}
}

func TestAvroNotes(t *testing.T) {
	res := &Results{
		Backlog: &BacklogResult{Runs: []DrainRun{{Relay: walboxName, EventsPerSec: 100}, {Relay: avroName, EventsPerSec: 70, PeakRSSBytes: 40 << 20}}},
		Steady:  &SteadyResult{Runs: []SteadyRun{{Relay: avroName, Latency: LatencyStats{P99Ms: 12}}}},
		Avro:    &AvroResult{DistinctSchemas: 2, BacklogRequests: 2, BacklogEvents: 1000, RequestsPerMillion: 2000},
	}
	notes := strings.Join(avroNotes(res), "\n")
	for _, want := range []string{"0.70x the JSON walbox's 100 (target >= 0.8x): MISSED", "40.0 MiB (target <= 64 MiB): met",
		"2 for 1,000 events", "distinct schemas", "whatever the events' number): met", "p99 at 2,000 events/s: 12.0 ms", "target < 50 ms: met"} {
		if !strings.Contains(notes, want) {
			t.Errorf("notes lack %q:\n%s", want, notes)
		}
	}
	if avroNotes(&Results{}) != nil {
		t.Error("notes without an Avro run")
	}
}
