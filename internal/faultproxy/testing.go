package faultproxy

import "testing"

// New starts a Proxy to target for one test, failing the test if it cannot,
// and closes it in t.Cleanup, failing the test if Close fails.
func New(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Start(target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() {
		if err := p.Close(); err != nil {
			t.Errorf("faultproxy: %v", err)
		}
	})
	return p
}
