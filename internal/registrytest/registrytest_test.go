package registrytest

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/walbox/walbox/internal/fulltest"
)

// TestStart builds (first time) and starts the registry, and checks the
// Confluent API answers as the package documents: BACKWARD set, 40402 for
// an unknown subject. It logs the build and start times and the RSS.
func TestStart(t *testing.T) {
	fulltest.Require(t, "builds and starts Apicurio Registry")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	began := time.Now()
	if _, built, err := Build(ctx); err != nil {
		t.Fatal(err)
	} else if built {
		t.Logf("built the registry in %s", time.Since(began).Round(time.Second))
	}
	began = time.Now()
	r := Start(t)
	t.Logf("registry ready in %s", time.Since(began).Round(time.Millisecond))
	if rss, err := r.RSS(); err == nil {
		t.Logf("registry RSS %d MiB", rss>>20)
	}
	for _, tc := range []struct{ path, want string }{
		{"/config", `"compatibilityLevel":"BACKWARD"`},
		{"/subjects/none-value/versions/latest", `"error_code":40402`},
	} {
		resp, err := http.Get(r.URL + tc.path)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(strings.ReplaceAll(string(b), " ", ""), tc.want) {
			t.Errorf("GET %s: %s %s, want %s", tc.path, resp.Status, b, tc.want)
		}
	}
}
