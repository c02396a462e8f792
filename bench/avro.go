package bench

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// The Avro drain (Config.Avro): walbox with --value-format avro against a
// schema registry served over HTTP from this process (franz-go's fake
// registry), beside the JSON walbox run of the same backlog, and a steady
// run at avroSteadyRate. The targets: the drain at least
// avroDrainTarget of the JSON rate, p99 under avroP99TargetMs at
// avroSteadyRate, walbox's peak RSS at most avroRSSTargetMiB, and no more
// registry requests per drain than distinct schemas (walbox reads each
// subject's schema once and caches it).

const (
	avroName         = "walbox-avro"
	avroSteadyRate   = 2000
	avroDrainTarget  = 0.8
	avroP99TargetMs  = 50
	avroRSSTargetMiB = 64
)

// avroSchema is the Avro schema of the generator's payloads (load.go),
// named after the aggregate type so that each topic has its own schema.
func avroSchema(name string) string {
	return `{"type": "record", "name": "` + name + `", "namespace": "bench", "fields": [
  {"name": "aggregate_id", "type": "string"},
  {"name": "event_id", "type": "long"},
  {"name": "amount_cents", "type": "long"},
  {"name": "currency", "type": "string"},
  {"name": "status", "type": "string"},
  {"name": "customer", "type": {"type": "record", "name": "` + name + `Customer", "fields": [
    {"name": "tier", "type": "string"}, {"name": "country", "type": "string"}]}},
  {"name": "items", "type": {"type": "array", "items": {"type": "record", "name": "` + name + `Item", "fields": [
    {"name": "sku", "type": "string"}, {"name": "qty", "type": "long"}, {"name": "price_cents", "type": "long"}]}}},
  {"name": "note", "type": "string"}]}`
}

// AvroResult is what the Avro runs add to the results.
type AvroResult struct {
	// DistinctSchemas is how many schemas the runs' topics use.
	DistinctSchemas int `json:"distinct_schemas"`
	// BacklogRequests are the registry requests walbox made during the
	// Avro backlog drain, of BacklogEvents events.
	BacklogRequests int64 `json:"backlog_registry_requests"`
	BacklogEvents   int   `json:"backlog_events"`
	// RequestsPerMillion is BacklogRequests per million events of the drain.
	RequestsPerMillion float64 `json:"registry_requests_per_million_events"`
	// SteadyRequests are the requests of the steady run.
	SteadyRequests int64 `json:"steady_registry_requests,omitempty"`
}

// benchRegistry is franz-go's fake registry with a request counter.
type benchRegistry struct {
	*srfake.Registry
	requests atomic.Int64
}

func startRegistry() *benchRegistry {
	b := &benchRegistry{Registry: srfake.New()}
	b.Intercept(func(http.ResponseWriter, *http.Request) bool {
		b.requests.Add(1)
		return false
	})
	return b
}

// register registers the payload schemas under the subjects of prefix's
// topics (TopicNameStrategy), one per aggregate type.
func (b *benchRegistry) register(prefix string) error {
	for _, typ := range []string{"order", "customer"} {
		name := map[string]string{"order": "Order", "customer": "Customer"}[typ]
		if _, _, err := b.RegisterSchema(prefix+"."+typ+"-value", sr.Schema{Schema: avroSchema(name)}); err != nil {
			return fmt.Errorf("register the Avro schema of %s.%s: %w", prefix, typ, err)
		}
	}
	return nil
}

// NewWalboxAvro returns walbox run from bin like NewWalboxProcess, with
// --value-format avro against the registry at url.
func (e *Env) NewWalboxAvro(bin, slot, prefix string, linger time.Duration, url, logPath string) *walboxProc {
	w := e.NewWalboxProcess(bin, slot, prefix, linger, logPath)
	w.name = avroName
	w.args = []string{"--value-format", "avro", "--schema-registry-url", url}
	return w
}

// avroNotes states the Avro targets and whether this run met them.
func avroNotes(res *Results) []string {
	a := res.Avro
	if a == nil {
		return nil
	}
	var n []string
	if b := res.Backlog; b != nil {
		if js, av := findDrain(b.Runs, walboxName), findDrain(b.Runs, avroName); js != nil && av != nil && js.EventsPerSec > 0 {
			ratio := av.EventsPerSec / js.EventsPerSec
			n = append(n, fmt.Sprintf("Avro backlog drain: %s events/s, %.2fx the JSON walbox's %s (target >= %.1fx): %s.",
				thousands(int(av.EventsPerSec)), ratio, thousands(int(js.EventsPerSec)), avroDrainTarget, verdict(ratio >= avroDrainTarget)))
			n = append(n, fmt.Sprintf("Avro drain peak RSS: %.1f MiB (target <= %d MiB): %s.",
				mib(av.PeakRSSBytes), avroRSSTargetMiB, verdict(av.PeakRSSBytes > 0 && mib(av.PeakRSSBytes) <= avroRSSTargetMiB)))
		}
		n = append(n, fmt.Sprintf("Registry requests during the Avro drain: %d for %s events, %.1f per million events; %d distinct schemas (target: no more requests than distinct schemas, whatever the events' number): %s.",
			a.BacklogRequests, thousands(a.BacklogEvents), a.RequestsPerMillion, a.DistinctSchemas, verdict(a.BacklogRequests <= int64(a.DistinctSchemas))))
	}
	if s := res.Steady; s != nil {
		if av := findSteady(s.Runs, avroName); av != nil {
			n = append(n, fmt.Sprintf("Avro p99 at %s events/s: %.1f ms (p50 %.1f ms, peak RSS %.1f MiB); target < %d ms: %s.",
				thousands(avroSteadyRate), av.Latency.P99Ms, av.Latency.P50Ms, mib(av.PeakRSSBytes), avroP99TargetMs, verdict(av.Latency.P99Ms < avroP99TargetMs)))
		}
	}
	n = append(n, "walbox-avro is walbox with --value-format avro (every other setting walbox's default) against franz-go's fake schema registry served over HTTP from the benchmark process, one schema per topic; its steady run writes "+thousands(avroSteadyRate)+" events/s, the issue's rate for the Avro latency target.")
	return n
}

// steadyRate is the rate a steady run was written at: the scenario's, but
// avroSteadyRate for the Avro run.
func steadyRate(s *SteadyResult, r SteadyRun) int {
	if r.Relay == avroName {
		return avroSteadyRate
	}
	return s.TargetRate
}
