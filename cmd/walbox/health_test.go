package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

type fakeRelayState struct{ standby, streaming bool }

func (f fakeRelayState) Standby() bool   { return f.standby }
func (f fakeRelayState) Streaming() bool { return f.streaming }

type fakePinger struct{ err error }

func (f fakePinger) Ping(context.Context) error { return f.err }

// TestReadyz: ready only while streaming with Kafka answering; /healthz
// is 200 in every state.
func TestReadyz(t *testing.T) {
	down := fakePinger{errors.New("unable to dial: connection refused")}
	for _, c := range []struct {
		name  string
		relay fakeRelayState
		kafka fakePinger
		code  int
		body  string
	}{
		{"streaming", fakeRelayState{streaming: true}, fakePinger{}, 200, "streaming"},
		{"standby", fakeRelayState{standby: true}, fakePinger{}, 503, "standby"},
		{"reconnecting", fakeRelayState{}, fakePinger{}, 503, "not streaming"},
		{"kafka down", fakeRelayState{streaming: true}, down, 503, "kafka unreachable"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			newReadiness(c.relay, c.kafka, slog.New(slog.DiscardHandler)).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != c.code || !strings.Contains(rec.Body.String(), c.body) {
				t.Errorf("/readyz = %d %q, want %d containing %q", rec.Code, rec.Body, c.code, c.body)
			}
			rec = httptest.NewRecorder()
			healthz(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if rec.Code != 200 {
				t.Errorf("/healthz = %d, want 200", rec.Code)
			}
		})
	}
}
