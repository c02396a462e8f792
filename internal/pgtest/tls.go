package pgtest

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
)

// TLS makes the server accept TCP connections only over TLS (ssl=on and a
// pg_hba.conf whose TCP lines are all hostssl); the unix socket, which
// pgtest itself uses, stays trusted. CertFile and KeyFile are the server's
// PEM certificate and unencrypted key. With ClientCAFile, every TCP
// connection must also present a client certificate signed by it whose
// common name is the role (clientcert=verify-full).
type TLS struct {
	CertFile, KeyFile string
	ClientCAFile      string
}

// WithTLS starts the server with TLS only, for TCP connections.
func WithTLS(t TLS) func(*Options) {
	return func(o *Options) { o.TLS = &t }
}

// setupTLS copies the certificate files into the data directory (the key
// must belong to the server's account, mode 0600), adds the ssl settings
// and returns the pg_hba.conf that allows TCP over TLS only.
func (s *Server) setupTLS(settings map[string]string) (string, error) {
	t := s.tls
	if t.CertFile == "" || t.KeyFile == "" {
		return "", fmt.Errorf("pgtest: TLS needs CertFile and KeyFile")
	}
	files := map[string]string{"server.crt": t.CertFile, "server.key": t.KeyFile}
	if t.ClientCAFile != "" {
		files["client-ca.crt"] = t.ClientCAFile
	}
	for name, src := range files {
		b, err := os.ReadFile(src)
		if err != nil {
			return "", fmt.Errorf("pgtest: TLS: %w", err)
		}
		dst := filepath.Join(s.dataDir, name)
		if err := os.WriteFile(dst, b, 0o600); err != nil {
			return "", fmt.Errorf("pgtest: TLS: %w", err)
		}
		if err := s.cred.chown(dst); err != nil {
			return "", err
		}
	}
	settings["ssl"] = "on"
	settings["ssl_cert_file"] = "server.crt"
	settings["ssl_key_file"] = "server.key"
	opt := ""
	if t.ClientCAFile != "" {
		settings["ssl_ca_file"] = "client-ca.crt"
		opt = " clientcert=verify-full"
	}
	return "# written by walbox internal/pgtest: TCP over TLS only\n" +
		"local   all         all              trust\n" +
		"local   replication all              trust\n" +
		"hostssl all         all 127.0.0.1/32 trust" + opt + "\n" +
		"hostssl replication all 127.0.0.1/32 trust" + opt + "\n", nil
}

// adminDSN is how pgtest itself connects: over TCP without TLS, or through
// the unix socket when TCP requires TLS.
func (s *Server) adminDSN(dbname string) string {
	if s.tls == nil {
		return s.DSN(dbname)
	}
	return fmt.Sprintf("host=%s port=%d user=postgres dbname=%s sslmode=disable", s.root, s.port, dbname)
}

// TLSDSN returns a URL connecting as postgres over TCP to dbname with
// sslmode=verify-full against the CA in rootCertFile, to host (a name or
// address the server certificate carries, e.g. "localhost").
func (s *Server) TLSDSN(dbname, host, rootCertFile string) string {
	q := url.Values{"sslmode": {"verify-full"}, "sslrootcert": {rootCertFile}}
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User("postgres"),
		Host:     net.JoinHostPort(host, strconv.Itoa(s.port)),
		Path:     "/" + dbname,
		RawQuery: q.Encode(),
	}
	return u.String()
}
