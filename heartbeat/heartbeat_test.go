package heartbeat

import (
	"encoding/json"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

func content(t *testing.T, instance string, seq uint64) []byte {
	t.Helper()
	b, err := json.Marshal(payload{Instance: instance, Seq: seq, SentAt: time.Now().UnixNano()})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestSeenAndLag: the lag is the age of the oldest outstanding heartbeat
// while one is outstanding, the last round trip otherwise; heartbeats of
// other instances, repeats after a reconnect and junk are ignored.
func TestSeenAndLag(t *testing.T) {
	m, err := New(time.Second, "walbox", nil, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	m.outstanding = []sent{{1, now.Add(-5 * time.Second)}, {2, now.Add(-3 * time.Second)}, {3, now.Add(-time.Second)}}
	if lag := m.Lag(); lag < 5*time.Second {
		t.Errorf("lag with three outstanding = %s, want at least the oldest's age 5s", lag)
	}
	m.Seen(content(t, "someone-else", 3))
	m.Seen([]byte("not json"))
	if m.Received() != 0 || len(m.outstanding) != 3 {
		t.Fatalf("foreign or junk heartbeat counted: received %d, outstanding %d", m.Received(), len(m.outstanding))
	}
	// 2 comes back: 1 was lost (its emit's transaction never came), both go.
	m.Seen(content(t, m.instance, 2))
	if m.Received() != 1 || len(m.outstanding) != 1 {
		t.Fatalf("after seeing 2: received %d, outstanding %d", m.Received(), len(m.outstanding))
	}
	if lag := m.Lag(); lag < 3*time.Second || lag > 4*time.Second {
		t.Errorf("lag = %s, want the round trip of 2, about 3s", lag)
	}
	m.Seen(content(t, m.instance, 3))
	m.Seen(content(t, m.instance, 3)) // sent again after a reconnect
	if m.Received() != 2 || len(m.outstanding) != 0 {
		t.Fatalf("after seeing 3 twice: received %d, outstanding %d", m.Received(), len(m.outstanding))
	}
	if lag := m.Lag(); lag < time.Second || lag > 2*time.Second {
		t.Errorf("lag = %s, want the round trip of 3, about 1s", lag)
	}
	if _, err := New(0, "walbox", nil, nil, prometheus.NewRegistry(), slog.New(slog.DiscardHandler)); err == nil {
		t.Error("New with interval 0 succeeded")
	}
}
