// Package otlp builds a tracing.Tracer that exports over OTLP (gRPC or
// HTTP/protobuf), as the OTEL_* variables say. It is apart from package
// tracing so that only the binaries that export (cmd/walbox) link the
// exporters and gRPC; the relay's packages and their tests link only the
// SDK.
package otlp

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/walbox/walbox/internal/version"
	"github.com/walbox/walbox/tracing"
)

// New returns the Tracer the environment asks for (tracing.FromEnv; nil
// env reads the process's), or nil, nil when tracing is off. Its spans go
// to the OTLP exporter of the configured protocol; Shutdown flushes them.
// The exporters read their OTEL_EXPORTER_OTLP_* variables themselves
// (endpoint, headers, timeout, compression, TLS certificates) from the
// process's environment; creating one does not connect.
func New(ctx context.Context, cfg tracing.Config, env tracing.Env, log *slog.Logger, reg prometheus.Registerer) (*tracing.Tracer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	s, cfg, err := tracing.FromEnv(env, cfg)
	if err != nil || !s.Enabled {
		return nil, err
	}
	var exp sdktrace.SpanExporter
	switch s.Protocol {
	case tracing.ProtocolGRPC:
		exp, err = otlptracegrpc.New(ctx)
	default:
		exp, err = otlptracehttp.New(ctx)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP %s exporter: %w; check OTEL_EXPORTER_OTLP_* variables", s.Protocol, err)
	}
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.version", version.Get().Version)))
	if err != nil {
		return nil, fmt.Errorf("tracing: resource from OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES: %w", err)
	}
	return tracing.NewWithExporter(cfg, exp, s.Sampler, res, log, reg), nil
}
