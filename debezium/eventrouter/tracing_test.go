package eventrouter

import (
	"testing"
)

// TestRouteTraceContextHeaders: with walbox tracing (TraceContextHeaders),
// the tracing.span.context.field column's java.util.Properties text becomes
// traceparent and tracestate headers; without it, or for NULL or a table
// without the column, the record is Debezium's without an agent.
func TestRouteTraceContextHeaders(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	props := "#Tue Dec 01 10:00:00 UTC 2026\ntraceparent=" + tp + "\ntracestate=rojo\\=00f067aa0ba902b7\n"
	tests := []struct {
		name   string
		on     bool
		column bool
		value  *string
		wantTP string
		wantTS string
	}{
		{name: "on", on: true, column: true, value: str(props), wantTP: tp, wantTS: "rojo=00f067aa0ba902b7"},
		{name: "on, bare traceparent", on: true, column: true, value: str(tp), wantTP: tp},
		{name: "on, NULL", on: true, column: true, value: nil},
		{name: "on, no such column", on: true},
		{name: "off", column: true, value: str(props)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := New(testConfig(func(c *Config) { c.TraceContextHeaders = tt.on }))
			if err != nil {
				t.Fatal(err)
			}
			cols := canonical(str("{}"))
			if tt.column {
				cols = append(cols, col{name: "tracingspancontext", oid: oidVarchar, value: tt.value})
			}
			got, err := r.Route(insert(cols))
			if err != nil {
				t.Fatal(err)
			}
			h := map[string]string{}
			for _, kv := range got.Record.Headers {
				h[kv.Key] = string(kv.Value)
			}
			if h["traceparent"] != tt.wantTP || h["tracestate"] != tt.wantTS {
				t.Errorf("traceparent %q tracestate %q, want %q %q (headers %s)", h["traceparent"], h["tracestate"], tt.wantTP, tt.wantTS, showHeaders(got.Record.Headers))
			}
		})
	}
}
