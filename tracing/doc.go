// Package tracing traces the relay hop with OpenTelemetry: for each event
// whose row carries a W3C trace context (a traceparent header), a producer
// span that is a child of the row's span (or, with ParentLink, the root of
// a new trace linked to it), from the moment walbox read the row's
// transaction to Kafka's acknowledgement.
//
// It is off unless configured, and configured the way every OpenTelemetry
// SDK is (package tracing/otlp builds the exporting Tracer): FromEnv reads OTEL_EXPORTER_OTLP_ENDPOINT /
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (tracing is on when either is set),
// OTEL_EXPORTER_OTLP_PROTOCOL (grpc or http/protobuf), the exporters' own
// variables (headers, timeout, TLS certificates, compression),
// OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES and OTEL_TRACES_SAMPLER (+
// _ARG); OTEL_SDK_DISABLED=true and OTEL_TRACES_EXPORTER=none turn it off.
// Config holds the few settings no OpenTelemetry variable covers.
//
// Sampling follows the writer: the default sampler is parent-based, so a
// row whose trace was not sampled costs no span, and its traceparent goes
// out unchanged.
//
// Spans never get in delivery's way: Tracer.End hands a finished span to a
// bounded queue without blocking; a worker goroutine exports batches. When
// the queue is full or an export fails (a collector that is down, slow or
// refusing), the spans are dropped, counted in
// walbox_tracing_spans_dropped_total and logged at most once a minute.
//
// A nil *Tracer is valid and traces nothing: every method is then a nil
// check, so the relay pays nothing when tracing is off.
package tracing
