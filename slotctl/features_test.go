package slotctl

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/walbox/walbox/internal/pgtest"
)

func TestFeaturesFor(t *testing.T) {
	tests := []struct {
		version int
		want    Features
	}{
		{130012, Features{}},
		{140010, Features{Messages: true, Streaming: true}},
		{160004, Features{Messages: true, Streaming: true}},
		{170000, Features{Messages: true, Streaming: true, FailoverSlots: true}},
		{180001, Features{Messages: true, Streaming: true, FailoverSlots: true}},
	}
	for _, tt := range tests {
		if got := FeaturesFor(tt.version); got != tt.want {
			t.Errorf("FeaturesFor(%d) = %+v, want %+v", tt.version, got, tt.want)
		}
	}
}

// TestFailoverSlot: on a server that has failover slots EnsureSlot creates
// one and insists on it; on an older one it says which version is needed.
func TestFailoverSlot(t *testing.T) {
	pgtest.ForEachVersion(t, func(t *testing.T, v pgtest.Version) {
		if v.Major != 15 && v.Major != 17 { // one without, one with
			t.Skipf("covered by pg15 and pg17")
		}
		ctx := context.Background()
		srv := pgtest.Start(t, pgtest.WithBinDir(v.BinDir))
		conn, err := pgx.Connect(ctx, srv.DSN("postgres"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `CREATE TABLE outbox (id bigint PRIMARY KEY, payload jsonb)`); err != nil {
			t.Fatal(err)
		}
		cfg := Config{Table: "outbox", Slot: "fo", CreateMissing: true, Failover: true}
		s, err := EnsureSlot(ctx, conn, cfg)
		if v.Major < 17 {
			if !errors.Is(err, ErrUnsupportedVersion) || !strings.Contains(err.Error(), "17") {
				t.Fatalf("EnsureSlot with failover on %d: %v, want ErrUnsupportedVersion naming 17", v.Major, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		if !s.Failover {
			t.Fatal("slot created without failover")
		}
		// A plain slot does not satisfy a failover configuration.
		if _, err := EnsureSlot(ctx, conn, Config{Table: "outbox", Slot: "plain", CreateMissing: true}); err != nil {
			t.Fatal(err)
		}
		if _, err := EnsureSlot(ctx, conn, Config{Table: "outbox", Slot: "plain", Failover: true}); !errors.Is(err, ErrSlotMismatch) {
			t.Fatalf("plain slot accepted as failover slot: %v", err)
		}
	})
}
