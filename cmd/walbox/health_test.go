package main

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/walbox/walbox/pipeline"
)

type fakeRelayState struct {
	standby, streaming bool
	erased             uint64
	skipped            bool
	ackSilent          time.Duration // > 0: records wait unacknowledged this long
}

func (f fakeRelayState) AckWait() (bool, int64, int64, time.Duration) {
	if f.ackSilent == 0 {
		return false, 0, 0, 0
	}
	return f.ackSilent >= pipeline.AckStallAfter, 2000, 1 << 20, f.ackSilent
}

func (f fakeRelayState) Standby() bool   { return f.standby }
func (f fakeRelayState) Streaming() bool { return f.streaming }
func (f fakeRelayState) FailoverErased() (uint64, time.Time) {
	if f.erased == 0 {
		return 0, time.Time{}
	}
	return f.erased, time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
}

func (f fakeRelayState) SlotSkipped() (from, to pglogrepl.LSN, at time.Time, n uint64) {
	if !f.skipped {
		return 0, 0, time.Time{}, 0
	}
	return 0x1000, 0x2000, time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC), 1
}

type fakeWaits struct {
	held  bool
	slots string
}

func (f fakeWaits) WaitingForStandby() (bool, string) { return f.held, f.slots }

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
		waits *fakeWaits
		code  int
		body  string
	}{
		{"streaming", fakeRelayState{streaming: true}, fakePinger{}, nil, 200, "streaming"},
		{"streaming, no standby wait", fakeRelayState{streaming: true}, fakePinger{}, &fakeWaits{}, 200, "streaming"},
		{"standby", fakeRelayState{standby: true}, fakePinger{}, nil, 503, "standby"},
		{"reconnecting", fakeRelayState{}, fakePinger{}, nil, 503, "not streaming"},
		{"kafka down", fakeRelayState{streaming: true}, down, nil, 503, "kafka unreachable"},
		// Issue 29: two of three brokers frozen, the third answering
		// pings, nothing acknowledged: /readyz said "streaming".
		{"nothing acknowledged, a broker answers", fakeRelayState{streaming: true, ackSilent: 20 * time.Second}, fakePinger{}, nil, 503,
			"waiting for kafka acknowledgements: none for 20s while 2000 records (1048576 bytes) wait, the oldest unacknowledged at least that long"},
		{"acknowledgements a little late", fakeRelayState{streaming: true, ackSilent: 2 * time.Second}, fakePinger{}, nil, 200, "streaming"},
		// Issue 26: the server held every change back for a dead standby
		// of synchronized_standby_slots for 47 s while /readyz said
		// "streaming".
		{"held back for a standby", fakeRelayState{streaming: true}, fakePinger{}, &fakeWaits{held: true, slots: "m1"}, 200,
			"degraded: connected, but receiving nothing: the server holds the slot's logical changes back until the standbys of synchronized_standby_slots confirm them; inactive there: m1"},
		// A failover erased events already in Kafka: visible, but ready
		// (a 503 or a failing probe would stall rollouts or restart
		// walbox in a loop, and fix nothing).
		{"erased by a failover", fakeRelayState{streaming: true, erased: 7}, fakePinger{}, nil, 200,
			"streaming, degraded: a failover at 2026-12-01T12:00:00Z erased 7 events already sent to Kafka"},
		// Someone else moved the slot ahead of walbox (slotgap.go): the
		// server skipped a range walbox never received.
		{"slot moved ahead", fakeRelayState{streaming: true, skipped: true}, fakePinger{}, nil, 200,
			"streaming, degraded: at 2026-12-01T13:00:00Z the server skipped the transactions committed between 0/1000 and 0/2000 because someone else had moved the slot ahead of walbox"},
		{"slot moved ahead and events erased", fakeRelayState{streaming: true, skipped: true, erased: 7}, fakePinger{}, nil, 200,
			"(ranges skipped since the start: 1; re-publish them, docs/slots.md; details in walbox's log)\nstreaming, degraded: a failover at 2026-12-01T12:00:00Z erased 7 events"},
	} {
		t.Run(c.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			h := newReadiness(c.relay, c.kafka, slog.New(slog.DiscardHandler))
			if c.waits != nil {
				h.waits = c.waits
			}
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
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
