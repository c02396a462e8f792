package tracing

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// ParentMode says how the producer span relates to the row's span.
type ParentMode string

const (
	// ParentChild (the default) makes the producer span a child of the
	// row's span, in the writer's trace.
	ParentChild ParentMode = "child"
	// ParentLink starts a new trace whose root, the producer span, links
	// to the row's span. Only rows whose trace was sampled get one.
	ParentLink ParentMode = "link"
)

// OutgoingMode says which trace context the record's traceparent carries.
type OutgoingMode string

const (
	// OutgoingProducer (the default) replaces the row's traceparent (and
	// tracestate) with the producer span's, as the OpenTelemetry messaging
	// conventions do: the consumer's span becomes a child of walbox's.
	OutgoingProducer OutgoingMode = "producer"
	// OutgoingRow keeps the row's own header values.
	OutgoingRow OutgoingMode = "row"
)

// Defaults.
const (
	DefaultContextHeader = "traceparent"
	DefaultQueueSize     = 2048
	DefaultBatchSize     = 512
	DefaultBatchDelay    = 5 * time.Second
	DefaultExportTimeout = 30 * time.Second
	// DropLogInterval is the least time between two logs of dropped spans.
	DropLogInterval = time.Minute
)

// Config holds what no OpenTelemetry variable covers; the zero value takes
// every default. Safe to copy.
type Config struct {
	// Parent is ParentChild (default) or ParentLink.
	Parent ParentMode
	// Outgoing is OutgoingProducer (default) or OutgoingRow.
	Outgoing OutgoingMode
	// ContextHeader is the record header that carries the row's W3C trace
	// context (DefaultContextHeader). Its value is a traceparent, or a
	// java.util.Properties text with a traceparent= line (what Debezium's
	// tracing.span.context.field column holds); a tracestate header next
	// to a traceparent one is read too.
	ContextHeader string
	// SpanName names the span; empty means "send <topic>", the messaging
	// conventions' name.
	SpanName string

	// The export queue: at most QueueSize finished spans wait (2048,
	// OTEL_BSP_MAX_QUEUE_SIZE), sent in batches of BatchSize (512,
	// OTEL_BSP_MAX_EXPORT_BATCH_SIZE) at least every BatchDelay (5s,
	// OTEL_BSP_SCHEDULE_DELAY), each export bounded by ExportTimeout (30s,
	// OTEL_BSP_EXPORT_TIMEOUT).
	QueueSize     int
	BatchSize     int
	BatchDelay    time.Duration
	ExportTimeout time.Duration
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.Parent == "" {
		c.Parent = ParentChild
	}
	if c.Outgoing == "" {
		c.Outgoing = OutgoingProducer
	}
	if c.ContextHeader == "" {
		c.ContextHeader = DefaultContextHeader
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchDelay == 0 {
		c.BatchDelay = DefaultBatchDelay
	}
	if c.ExportTimeout == 0 {
		c.ExportTimeout = DefaultExportTimeout
	}
	return c
}

// Validate reports the first invalid field, naming its value.
func (c Config) Validate() error {
	switch c.Parent {
	case "", ParentChild, ParentLink:
	default:
		return fmt.Errorf("tracing: parent %q: want %q or %q", c.Parent, ParentChild, ParentLink)
	}
	switch c.Outgoing {
	case "", OutgoingProducer, OutgoingRow:
	default:
		return fmt.Errorf("tracing: outgoing traceparent %q: want %q or %q", c.Outgoing, OutgoingProducer, OutgoingRow)
	}
	if c.QueueSize < 0 || c.BatchSize < 0 || c.BatchDelay < 0 || c.ExportTimeout < 0 {
		return fmt.Errorf("tracing: queue size %d, batch size %d, batch delay %s, export timeout %s: none may be negative",
			c.QueueSize, c.BatchSize, c.BatchDelay, c.ExportTimeout)
	}
	return nil
}

// Env is what FromEnv reads, a lookup like os.LookupEnv; tests pass a map's.
type Env func(string) (string, bool)

// Protocols of the OTLP exporter.
const (
	ProtocolGRPC = "grpc"
	ProtocolHTTP = "http/protobuf"
)

// Settings is what the environment says about tracing.
type Settings struct {
	// Enabled is true when an OTLP endpoint is set and neither
	// OTEL_SDK_DISABLED=true nor OTEL_TRACES_EXPORTER=none turns it off.
	Enabled bool
	// Protocol is ProtocolGRPC or ProtocolHTTP (the OpenTelemetry default).
	Protocol string
	// Sampler is from OTEL_TRACES_SAMPLER (+ _ARG); parent-based
	// always-on when unset.
	Sampler sdktrace.Sampler
}

// FromEnv reads the standard OpenTelemetry variables, and the batch
// span processor's (OTEL_BSP_*) into c's zero fields. An invalid value is
// an error naming the variable, its value and what it accepts: the SDK
// would only report it to its global error handler, and walbox would run
// with a configuration nobody asked for.
func FromEnv(env Env, c Config) (Settings, Config, error) {
	if env == nil {
		env = os.LookupEnv
	}
	get := func(k string) string { v, _ := env(k); return strings.TrimSpace(v) }
	var s Settings
	if strings.EqualFold(get("OTEL_SDK_DISABLED"), "true") {
		return s, c, nil
	}
	switch exp := strings.ToLower(get("OTEL_TRACES_EXPORTER")); exp {
	case "", "otlp":
	case "none":
		return s, c, nil
	default:
		return s, c, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: walbox exports traces with OTLP only; set otlp or none", exp)
	}
	if get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" && get("OTEL_EXPORTER_OTLP_ENDPOINT") == "" {
		return s, c, nil
	}
	s.Enabled = true
	key, proto := "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		key, proto = "OTEL_EXPORTER_OTLP_PROTOCOL", get("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	switch proto {
	case "", ProtocolHTTP:
		s.Protocol = ProtocolHTTP
	case ProtocolGRPC:
		s.Protocol = ProtocolGRPC
	default:
		return s, c, fmt.Errorf("%s=%q: want %s or %s", key, proto, ProtocolGRPC, ProtocolHTTP)
	}
	var err error
	if s.Sampler, err = samplerFromEnv(get("OTEL_TRACES_SAMPLER"), get("OTEL_TRACES_SAMPLER_ARG")); err != nil {
		return s, c, err
	}
	ints := []struct {
		key string
		dst *int
	}{{"OTEL_BSP_MAX_QUEUE_SIZE", &c.QueueSize}, {"OTEL_BSP_MAX_EXPORT_BATCH_SIZE", &c.BatchSize}}
	for _, i := range ints {
		if v := get(i.key); v != "" && *i.dst == 0 {
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return s, c, fmt.Errorf("%s=%q: want a positive integer", i.key, v)
			}
			*i.dst = n
		}
	}
	durs := []struct {
		key string
		dst *time.Duration
	}{{"OTEL_BSP_SCHEDULE_DELAY", &c.BatchDelay}, {"OTEL_BSP_EXPORT_TIMEOUT", &c.ExportTimeout}}
	for _, d := range durs {
		if v := get(d.key); v != "" && *d.dst == 0 {
			ms, err := strconv.Atoi(v)
			if err != nil || ms <= 0 {
				return s, c, fmt.Errorf("%s=%q: want a positive number of milliseconds", d.key, v)
			}
			*d.dst = time.Duration(ms) * time.Millisecond
		}
	}
	return s, c, nil
}

// samplerFromEnv is the SDK's OTEL_TRACES_SAMPLER parsing, with errors
// returned instead of handed to the global handler.
func samplerFromEnv(name, arg string) (sdktrace.Sampler, error) {
	ratio := func() (sdktrace.Sampler, error) {
		if arg == "" {
			return sdktrace.TraceIDRatioBased(1), nil
		}
		f, err := strconv.ParseFloat(arg, 64)
		if err != nil || f < 0 || f > 1 {
			return nil, fmt.Errorf("OTEL_TRACES_SAMPLER_ARG=%q: want a ratio from 0 to 1 for OTEL_TRACES_SAMPLER=%s", arg, name)
		}
		return sdktrace.TraceIDRatioBased(f), nil
	}
	switch strings.ToLower(name) {
	case "", "parentbased_always_on":
		return sdktrace.ParentBased(sdktrace.AlwaysSample()), nil
	case "always_on":
		return sdktrace.AlwaysSample(), nil
	case "always_off":
		return sdktrace.NeverSample(), nil
	case "parentbased_always_off":
		return sdktrace.ParentBased(sdktrace.NeverSample()), nil
	case "traceidratio":
		return ratio()
	case "parentbased_traceidratio":
		r, err := ratio()
		if err != nil {
			return nil, err
		}
		return sdktrace.ParentBased(r), nil
	default:
		return nil, fmt.Errorf("OTEL_TRACES_SAMPLER=%q: want always_on, always_off, traceidratio, parentbased_always_on (the default), parentbased_always_off or parentbased_traceidratio", name)
	}
}
