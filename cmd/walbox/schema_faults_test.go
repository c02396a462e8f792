package main

import (
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walbox/walbox/internal/fulltest"
	"github.com/walbox/walbox/router"
)

// TestRunRegistryFaultsConfirmNothing: a registry fault met mid-stream on a
// subject that is not cached (the connection dropped, a 500, a 403, the
// subject deleted) confirms nothing past the last acknowledged record: the
// slot stays before the row while the fault lasts (transient) or after
// walbox stopped on it (refusal), and the row arrives, once, when the
// registry answers again (after a restart for a refusal). A 409 cannot
// happen here: the registered-contract mode never registers a schema.
func TestRunRegistryFaultsConfirmNothing(t *testing.T) {
	fulltest.Require(t, "four registry faults mid-stream with restarts (14 s); TestRunAvroRegistryFaults covers a 503 and a 401 in the short run")
	e := newTableEnv(t)
	reg := srfake.New()
	t.Cleanup(reg.Close)
	faults := []struct {
		name      string
		transient bool
		answer    func(w http.ResponseWriter)
	}{
		{"connection dropped", true, func(w http.ResponseWriter) {
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				c.Close()
			}
		}},
		{"500", true, func(w http.ResponseWriter) {
			w.WriteHeader(500)
			w.Write([]byte(`{"error_code": 50001, "message": "injected"}`))
		}},
		{"403", false, func(w http.ResponseWriter) {
			w.WriteHeader(403)
			w.Write([]byte(`{"error_code": 40301, "message": "injected"}`))
		}},
		{"deleted subject", false, func(w http.ResponseWriter) {
			w.WriteHeader(404)
			w.Write([]byte(`{"error_code": 40401, "message": "Subject not found"}`))
		}},
	}
	var active atomic.Int32 // 1 + the index of the fault injected; 0 answers normally
	reg.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
		i := active.Load()
		if i == 0 {
			return false
		}
		faults[i-1].answer(w)
		return true
	})
	for i := range faults {
		typ := "t" + string(rune('a'+i))
		if _, _, err := reg.RegisterSchema("outbox.event."+typ+"-value", sr.Schema{Schema: orderAvro}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := e.cfg
	cfg.KafkaBrokers = e.brokers
	cfg.ValueFormat = "avro"
	cfg.SchemaRegistry.URLs = []string{reg.URL()}
	cfg.SchemaRegistry.RetryBudget = 300 * time.Millisecond
	confirmed := func() pglogrepl.LSN {
		var s string
		if err := e.conn.QueryRow(ctxT(t), `SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1`, cfg.Slot).Scan(&s); err != nil {
			t.Fatal(err)
		}
		l, _ := pglogrepl.ParseLSN(s)
		return l
	}
	in := startInstance(t, cfg)
	waitFor(t, "walbox to be ready", func() bool { c, _ := in.get("/readyz"); return c == 200 })
	for i, f := range faults {
		typ := "t" + string(rune('a'+i))
		active.Store(int32(i + 1))
		e.exec(t, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, event_type, payload) VALUES ($1, $2, 'a-1', 'placed', '{"n": 1, "status": "NEW"}')`, tid(100+i), typ)
		var after string
		if err := e.conn.QueryRow(ctxT(t), `SELECT pg_current_wal_lsn()::text`).Scan(&after); err != nil {
			t.Fatal(err)
		}
		afterLSN, _ := pglogrepl.ParseLSN(after)
		if f.transient {
			waitFor(t, f.name+": /readyz to name the registry", func() bool {
				c, body := in.get("/readyz")
				return c == http.StatusServiceUnavailable && strings.Contains(body, "outbox.event."+typ+"-value")
			})
			// Several status intervals pass with the fault on.
			deadline := time.Now().Add(2 * time.Second)
			for time.Now().Before(deadline) {
				if c := confirmed(); c >= afterLSN {
					t.Fatalf("%s: the slot was confirmed to %s, past the row (before %s)", f.name, c, afterLSN)
				}
				time.Sleep(100 * time.Millisecond) // sampling the slot during the window
			}
		} else {
			select {
			case err := <-in.done:
				in.once.Do(func() {})
				if err == nil || !strings.Contains(err.Error(), "outbox.event."+typ+"-value") || !strings.Contains(err.Error(), tid(100+i)) {
					t.Fatalf("%s: walbox stopped with %v, want the subject and the row named", f.name, err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: walbox did not stop", f.name)
			}
			if c := confirmed(); c >= afterLSN {
				t.Fatalf("%s: the slot was confirmed to %s, past the row (before %s)", f.name, c, afterLSN)
			}
		}
		active.Store(0)
		if !f.transient {
			in = startInstance(t, cfg)
		}
		recs := consumeNew(t, e.brokers, `^outbox\.event\.`+typ+`$`, 1)
		if header(recs[0], router.HeaderEventID) != tid(100+i) {
			t.Fatalf("%s: record %v, want the row", f.name, recs[0])
		}
		if extra := consumeFor(t, e.brokers, `^outbox\.event\.`+typ+`$`, time.Second); len(extra) != 1 {
			t.Errorf("%s: %d records of the row, want exactly one", f.name, len(extra))
		}
		waitFor(t, f.name+": the slot to pass the row", func() bool { return confirmed() >= afterLSN })
	}
}
