package schemareg

import (
	"context"
	"crypto/tls"
	"net/http/httptest"
	"testing"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"

	"github.com/walbox/walbox/internal/certtest"
)

// TestMutualTLS: the registry is verified with the CA file and walbox
// presents its client certificate; without the certificate the handshake
// fails, and so does an unknown CA, each a refusal naming the fix.
func TestMutualTLS(t *testing.T) {
	ca := certtest.NewCA(t, "registry")
	server := ca.Server(t, "127.0.0.1")
	client := ca.Client(t, "walbox")
	f := srfake.New()
	defer f.Close()
	if _, _, err := f.RegisterSchema("orders-value", sr.Schema{Schema: idAvro}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f.Handler())
	srv.TLS = &tls.Config{
		Certificates: []tls.Certificate{server.TLS(t)},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    ca.Pool(),
	}
	srv.StartTLS()
	defer srv.Close()

	tests := []struct {
		name string
		cfg  func(*ClientConfig)
		ok   bool
		want string
	}{
		{name: "mutual TLS", ok: true, cfg: func(c *ClientConfig) {
			c.TLSCAFile, c.TLSCertFile, c.TLSKeyFile = ca.CertFile, client.CertFile, client.KeyFile
		}},
		{name: "no client certificate", want: "give a client certificate", cfg: func(c *ClientConfig) { c.TLSCAFile = ca.CertFile }},
		{name: "unknown CA", want: "give the CA that signed it", cfg: func(*ClientConfig) {}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cl := newTestClient(t, srv.URL, tt.cfg, func(c *ClientConfig) { c.RetryBudget = 1 })
			e, err := NewEncoder(Config{Format: FormatAvro}, cl, nil)
			if err != nil {
				t.Fatal(err)
			}
			_, err = e.Encode(context.Background(), nil, "orders", []byte(`{"id": 1}`))
			if tt.ok {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			// Asking again changes nothing: refused, not retried.
			wantRegistryError(t, err, ErrRegistryRefused, tt.want)
		})
	}
}
