package pgtest

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"testing"
)

// TestPortClash takes the server's port while it is stopped: Restart must
// report the clash (it keeps the port by contract) with errPortInUse, which
// is what makes StartServer retry on a fresh port.
func TestPortClash(t *testing.T) {
	t.Parallel()
	s := Start(t)
	ctx := context.Background()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp4", "127.0.0.1:"+strconv.Itoa(s.Port()))
	if err != nil {
		// Another process took the freed port first: rare, and not this
		// code's fault, but a required run must not pass without the check.
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("could not take port %d ourselves (%v), and %s=1 forbids skipping; rerun", s.Port(), err, RequireEnv)
		}
		t.Skipf("could not take the port ourselves: %v", err)
	}
	err = s.Restart(ctx)
	l.Close()
	if !errors.Is(err, errPortInUse) {
		t.Fatalf("Restart on a taken port = %v, want errPortInUse", err)
	}
	if err := s.Restart(ctx); err != nil {
		t.Fatalf("Restart once the port is free again: %v", err)
	}
}
