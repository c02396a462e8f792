package kafkatest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// SASLSSL adds a SASL_SSL listener with SCRAM-SHA-512 beside the PLAINTEXT
// one (which the harness, inter-broker traffic and unsecured test clients
// keep using). Its server certificate and key are PEM files (the key
// unencrypted, PKCS#8), for 127.0.0.1; its one user is created when the
// storage is formatted (kafka-storage format --add-scram).
type SASLSSL struct {
	CertFile, KeyFile string
	User, Password    string
}

// WithSASLSSL adds a SASL_SSL listener; Broker.SASLSSLAddrs returns it.
func WithSASLSSL(s SASLSSL) func(*Options) {
	return func(o *Options) { o.SASLSSL = &s }
}

// validate reports a listener the broker cannot be given.
func (s *SASLSSL) validate() error {
	if s == nil {
		return nil
	}
	if s.CertFile == "" || s.KeyFile == "" || s.User == "" || s.Password == "" {
		return fmt.Errorf("kafkatest: SASLSSL needs CertFile, KeyFile, User and Password")
	}
	for _, v := range []string{s.User, s.Password} {
		if strings.ContainsAny(v, ",[]=\" \t\r\n") {
			return fmt.Errorf("kafkatest: SASLSSL: user and password may not contain , [ ] = \" or spaces (kafka-storage --add-scram syntax)")
		}
	}
	return nil
}

// saslListener is the listener's name in server.properties.
const saslListener = "SASL_SSL"

// addSASLSSL adds the listener to p, writing the PEM keystore into dir.
func (s *SASLSSL) addProperties(p map[string]string, port int, dir string) error {
	cert, err := os.ReadFile(s.CertFile)
	if err != nil {
		return fmt.Errorf("kafkatest: SASLSSL: %w", err)
	}
	key, err := os.ReadFile(s.KeyFile)
	if err != nil {
		return fmt.Errorf("kafkatest: SASLSSL: %w", err)
	}
	keystore := filepath.Join(dir, "sasl-ssl-keystore.pem")
	if err := os.WriteFile(keystore, append(append(key, '\n'), cert...), 0o600); err != nil {
		return fmt.Errorf("kafkatest: SASLSSL: %w", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	p["listeners"] += "," + saslListener + "://" + addr
	p["advertised.listeners"] += "," + saslListener + "://" + addr
	p["listener.security.protocol.map"] += "," + saslListener + ":SASL_SSL"
	l := "listener.name." + strings.ToLower(saslListener) + "."
	p[l+"sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
	p[l+"scram-sha-512.sasl.jaas.config"] = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
	p[l+"ssl.keystore.type"] = "PEM"
	p[l+"ssl.keystore.location"] = keystore
	return nil
}

// formatArgs creates the user when the storage is formatted.
func (s *SASLSSL) formatArgs() []string {
	return []string{"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", s.User, s.Password)}
}

// SASLSSLAddrs returns the SASL_SSL listener's address, for a broker
// started WithSASLSSL; nil otherwise.
func (b *Broker) SASLSSLAddrs() []string {
	if b.opts.SASLSSL == nil || b.external != nil {
		return nil
	}
	return []string{net.JoinHostPort("127.0.0.1", strconv.Itoa(b.saslPort))}
}

// freePort asks the kernel for one free loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
