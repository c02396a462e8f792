package schemareg

import (
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/twmb/franz-go/pkg/sr"
)

// TestLatestTTL: with LatestTTL the latest version is read again once the
// cached schema is older: a version registered meanwhile is used from then
// on; a registry that is down then changes nothing (the cached schema
// stays, no error); without LatestTTL the first version stays.
func TestLatestTTL(t *testing.T) {
	const v1 = `{"type":"record","name":"O","fields":[{"name":"n","type":"long"}]}`
	const v2 = `{"type":"record","name":"O","fields":[{"name":"n","type":"long"},{"name":"s","type":"string","default":"x"}]}`
	for _, ttl := range []time.Duration{0, time.Minute} {
		f := newFake(t)
		id1 := f.register(t, "t-value", sr.TypeAvro, v1)
		e, _ := newTestEncoder(t, f, Config{Format: FormatAvro, LatestTTL: ttl})
		now := time.Unix(1_000_000, 0)
		e.now = func() time.Time { return now }
		enc := func() uint32 {
			t.Helper()
			out, err := e.EncodeValue(nil, "t", []byte(`{"n":1}`))
			if err != nil {
				t.Fatalf("ttl %v: %v", ttl, err)
			}
			id, _, err := ParseHeader(out)
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		if id := enc(); id != uint32(id1) {
			t.Fatalf("id %d, want %d", id, id1)
		}
		id2 := f.register(t, "t-value", sr.TypeAvro, v2)
		now = now.Add(59 * time.Second)
		if id := enc(); id != uint32(id1) {
			t.Errorf("ttl %v: before the TTL: id %d, want %d", ttl, id, id1)
		}
		now = now.Add(time.Second)
		want := uint32(id2)
		if ttl == 0 {
			want = uint32(id1)
		}
		if id := enc(); id != want {
			t.Errorf("ttl %v: after the TTL: id %d, want %d", ttl, id, want)
		}
		if ttl == 0 {
			continue
		}
		// Down at the next refresh: the cached v2 stays, and the next
		// refresh is a TTL later.
		var down atomic.Bool
		down.Store(true)
		f.Intercept(func(w http.ResponseWriter, _ *http.Request) bool {
			if down.Load() {
				w.WriteHeader(http.StatusServiceUnavailable)
				return true
			}
			return false
		})
		now = now.Add(time.Minute)
		if id := enc(); id != uint32(id2) {
			t.Errorf("registry down at the refresh: id %d, want %d", id, id2)
		}
		if n := testutil.ToFloat64(e.refreshes); n != 2 {
			t.Errorf("refreshes %v, want 2", n)
		}
		if got := testutil.ToFloat64(e.requests.WithLabelValues("transient")); got == 0 {
			t.Errorf("the failed refresh is not counted as transient")
		}
	}
}
