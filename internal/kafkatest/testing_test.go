package kafkatest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

// recordTB records whether a helper skipped or failed the test, and why;
// both end the calling goroutine, as they do on a real *testing.T.
type recordTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (r *recordTB) Helper() {}
func (r *recordTB) Skipf(format string, args ...any) {
	r.skipped = true
	r.msg = fmtMsg(format, args)
	runtime.Goexit()
}

func (r *recordTB) Fatalf(format string, args ...any) {
	r.failed = true
	r.msg = fmtMsg(format, args)
	runtime.Goexit()
}

// TestRequireFaultsConsultsRequireEnv checks the broker-kill scenarios
// (e2e TestFaults, TestStartKillRestart) against an external cluster: a
// skip normally, a failure naming KAFKA_BROKERS under
// WALBOX_REQUIRE_INTEGRATION=1. RequireFaults used to skip in both cases,
// so a required run with KAFKA_BROKERS set passed without killing anything.
func TestRequireFaultsConsultsRequireEnv(t *testing.T) {
	for _, tt := range []struct {
		require            string
		wantSkip, wantFail bool
	}{
		{require: "", wantSkip: true},
		{require: "1", wantFail: true},
	} {
		t.Run("require="+tt.require, func(t *testing.T) {
			t.Setenv(RequireEnv, tt.require)
			b := &Broker{external: []string{"127.0.0.1:9"}}
			r := &recordTB{TB: t}
			done := make(chan struct{})
			go func() {
				defer close(done)
				b.RequireFaults(r)
			}()
			<-done
			if r.skipped != tt.wantSkip || r.failed != tt.wantFail {
				t.Fatalf("RequireFaults on an external cluster, %s=%q: skipped %v, failed %v; want skipped %v, failed %v",
					RequireEnv, tt.require, r.skipped, r.failed, tt.wantSkip, tt.wantFail)
			}
			if !strings.Contains(r.msg, BrokersEnv) {
				t.Errorf("message %q does not name %s", r.msg, BrokersEnv)
			}
			if tt.wantFail && !strings.Contains(r.msg, "unset "+BrokersEnv) {
				t.Errorf("failure %q does not say to unset %s", r.msg, BrokersEnv)
			}
		})
	}
}

func fmtMsg(format string, args []any) string { return fmt.Sprintf(format, args...) }
