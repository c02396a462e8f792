package retention

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestKeeperMetricsLint(t *testing.T) {
	reg := prometheus.NewRegistry()
	cc, _ := pgx.ParseConfig("postgres://u@127.0.0.1:1/db")
	_, err := New(Config{Slot: "walbox", Window: time.Hour}, cc, func() pglogrepl.LSN { return 0 }, reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", err, problems)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP walbox_replay_window_seconds The configured replay window (--replay-window).
# TYPE walbox_replay_window_seconds gauge
walbox_replay_window_seconds 3600
`), "walbox_replay_window_seconds"); err != nil {
		t.Error(err)
	}
}

func TestNewRefuses(t *testing.T) {
	cc, _ := pgx.ParseConfig("postgres://u@127.0.0.1:1/db")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, c := range []Config{
		{Slot: "walbox"},                                  // window 0: disabled
		{Slot: "walbox", Window: -time.Second},            // negative
		{Slot: "walbox", ReplaySlot: "walbox", Window: 1}, // the live slot itself
		{Slot: "walbox", ReplaySlot: "Bad", Window: 1},
	} {
		if _, err := New(c, cc, nil, prometheus.NewRegistry(), log); !errors.Is(err, ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", c, err)
		}
	}
}
