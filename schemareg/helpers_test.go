package schemareg

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// fakeRegistry is srfake with a request counter.
type fakeRegistry struct {
	*srfake.Registry
	requests atomic.Int64
}

func newFake(t *testing.T) *fakeRegistry {
	t.Helper()
	f := &fakeRegistry{Registry: srfake.New()}
	t.Cleanup(f.Close)
	f.Intercept(func(http.ResponseWriter, *http.Request) bool {
		f.requests.Add(1)
		return false
	})
	return f
}

// register registers schema under subject and returns its id.
func (f *fakeRegistry) register(t *testing.T, subject string, typ sr.SchemaType, schema string, refs ...sr.SchemaReference) int {
	t.Helper()
	id, _, err := f.RegisterSchema(subject, sr.Schema{Schema: schema, Type: typ, References: refs})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return id
}

// newTestClient returns a client of f that does not wait between retries.
func newTestClient(t *testing.T, url string, mod ...func(*ClientConfig)) *Client {
	t.Helper()
	cfg := ClientConfig{URLs: []string{url}, RetryBudget: 2 * time.Second}
	for _, m := range mod {
		m(&cfg)
	}
	cl, err := NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cl.sleep = func(ctx context.Context, _ time.Duration) error { return ctx.Err() }
	return cl
}

func newTestEncoder(t *testing.T, f *fakeRegistry, cfg Config) (*Encoder, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	e, err := NewEncoder(cfg, newTestClient(t, f.URL()), reg)
	if err != nil {
		t.Fatal(err)
	}
	return e, reg
}

// wantPayloadError checks err is a *PayloadError at path whose problem
// contains every one of want.
func wantPayloadError(t *testing.T, err error, path string, want ...string) {
	t.Helper()
	var pe *PayloadError
	if !errors.As(err, &pe) || !errors.Is(err, ErrInvalidPayload) {
		t.Fatalf("error %v (%T), want a *PayloadError", err, err)
	}
	if pe.Path != path {
		t.Errorf("path %q, want %q (error: %v)", pe.Path, path, err)
	}
	for _, w := range want {
		if !strings.Contains(pe.Problem, w) {
			t.Errorf("problem %q lacks %q", pe.Problem, w)
		}
	}
}

// wantRegistryError checks err is a *RegistryError of class whose text
// contains every one of want.
func wantRegistryError(t *testing.T, err error, class error, want ...string) {
	t.Helper()
	var re *RegistryError
	if !errors.As(err, &re) || !errors.Is(err, class) {
		t.Fatalf("error %v (%T), want a *RegistryError wrapping %v", err, err, class)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
}
