package pipeline

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestBrokerWatchLogsOutagesNotAttempts: many failed dials of a broker are
// one warning and one line when it is back, and the metrics follow.
func TestBrokerWatchLogsOutagesNotAttempts(t *testing.T) {
	var out bytes.Buffer
	reg := prometheus.NewRegistry()
	w := newBrokerWatch(slog.New(slog.NewTextHandler(&out, nil)), reg)
	b2 := kgo.BrokerMetadata{NodeID: 2, Host: "127.0.0.1", Port: 9092}
	refused := errors.New("connect: connection refused")
	for range 20 {
		w.OnBrokerConnect(b2, 0, nil, refused)
	}
	if got := testutil.ToFloat64(w.collectors[0]); got != 1 {
		t.Errorf("walbox_kafka_brokers_unreachable = %v during the outage, want 1", got)
	}
	w.OnBrokerConnect(b2, 0, nil, nil)
	w.OnBrokerConnect(b2, 0, nil, nil) // a second connection: nothing to say
	w.OnBrokerConnect(b2, 0, nil, refused)
	w.OnBrokerConnect(b2, 0, nil, nil)
	logs := out.String()
	if n := strings.Count(logs, "kafka broker unreachable"); n != 2 {
		t.Errorf("%d unreachable lines for 2 outages of 20 and 1 failed dials, want 2:\n%s", n, logs)
	}
	if n := strings.Count(logs, "kafka broker reachable again"); n != 2 {
		t.Errorf("%d reachable-again lines, want 2:\n%s", n, logs)
	}
	if !strings.Contains(logs, "failed_attempts=20") {
		t.Errorf("the first outage's line does not count its 20 failed dials:\n%s", logs)
	}
	if got := testutil.ToFloat64(w.collectors[0]); got != 0 {
		t.Errorf("walbox_kafka_brokers_unreachable = %v after it came back, want 0", got)
	}
	if got := testutil.ToFloat64(w.collectors[1]); got != 2 {
		t.Errorf("walbox_kafka_broker_outages_total = %v, want 2", got)
	}
	w.OnClientClosed(nil)
	if mfs, _ := reg.Gather(); len(mfs) != 0 {
		t.Errorf("%d metric families left after the client closed, want 0", len(mfs))
	}
}

// TestQuietKafkaLoggerDemotesPerAttemptLines: franz-go's per-attempt
// lines go to debug, everything else keeps its level.
func TestQuietKafkaLoggerDemotesPerAttemptLines(t *testing.T) {
	var got []kgo.LogLevel
	l := quietKafkaLogger{levelRecorder{&got}}
	l.Log(kgo.LogLevelWarn, "unable to open connection to broker")
	l.Log(kgo.LogLevelInfo, "metadata update triggered")
	l.Log(kgo.LogLevelWarn, "something else")
	want := []kgo.LogLevel{kgo.LogLevelDebug, kgo.LogLevelDebug, kgo.LogLevelWarn}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Errorf("levels %v, want %v", got, want)
	}
}

type levelRecorder struct{ got *[]kgo.LogLevel }

func (r levelRecorder) Level() kgo.LogLevel { return kgo.LogLevelDebug }
func (r levelRecorder) Log(level kgo.LogLevel, _ string, _ ...any) {
	*r.got = append(*r.got, level)
}
