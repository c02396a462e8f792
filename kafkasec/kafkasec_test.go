package kafkasec_test

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/walbox/walbox/internal/certtest"
	"github.com/walbox/walbox/kafkasec"
)

const secret = "s3cret-Pa55word-7f1e"

// cluster starts a kfake cluster listening with TLS (server certificate for
// 127.0.0.1 signed by ca) and SCRAM-SHA-512 user walbox/secret.
func cluster(t *testing.T, ca *certtest.CA, clientCAs bool) []string {
	t.Helper()
	srv := ca.Server(t, "127.0.0.1", "localhost")
	tc := &tls.Config{Certificates: []tls.Certificate{srv.TLS(t)}, MinVersion: tls.VersionTLS12}
	if clientCAs {
		tc.ClientCAs = ca.Pool()
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(tc), kfake.EnableSASL(),
		kfake.Superuser(kafkasec.MechanismScramSHA512, "walbox", secret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func secretFile(t *testing.T, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(p, []byte(content+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// ping connects with c and asks for metadata, which needs TLS and SASL.
func ping(t *testing.T, addrs []string, c kafkasec.Config) error {
	t.Helper()
	opts, err := c.Options()
	if err != nil {
		t.Fatalf("Options: %v", err)
	}
	cl, err := kgo.NewClient(append(opts, kgo.SeedBrokers(addrs...))...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return cl.Ping(ctx)
}

func TestConnects(t *testing.T) {
	ca := certtest.NewCA(t, "kafka")
	addrs := cluster(t, ca, true)
	client := ca.Client(t, "walbox")
	good := kafkasec.Config{
		TLSCAFile: ca.CertFile, TLSCertFile: client.CertFile, TLSKeyFile: client.KeyFile,
		SASLMechanism: kafkasec.MechanismScramSHA512, SASLUsername: "walbox", SASLPasswordFile: secretFile(t, secret),
	}
	if !good.TLSEnabled() {
		t.Fatal("a TLS option did not turn TLS on")
	}
	if err := ping(t, addrs, good); err != nil {
		t.Fatalf("mutual TLS + SCRAM-SHA-512 with the password from a file: %v", err)
	}
	inline := good
	inline.SASLPasswordFile, inline.SASLPassword = "", secret
	if err := ping(t, addrs, inline); err != nil {
		t.Fatalf("password given inline: %v", err)
	}

	wrongPass := good
	wrongPass.SASLPasswordFile = secretFile(t, "not-the-password")
	if err := ping(t, addrs, wrongPass); err == nil {
		t.Error("a wrong password connected")
	} else if strings.Contains(err.Error(), "not-the-password") {
		// kfake closes the connection instead of answering
		// SASL_AUTHENTICATION_FAILED, so AuthFailure is tested on that
		// error below.
		t.Errorf("the error shows the password: %v", err)
	}

	untrusted := good
	untrusted.TLSCAFile = certtest.NewCA(t, "other").CertFile
	if err := ping(t, addrs, untrusted); err == nil {
		t.Error("a broker certificate from an untrusted CA was accepted")
	} else {
		checkAuthFailure(t, untrusted, err, "--kafka-tls-ca-file", secret)
	}

	insecure := untrusted
	insecure.TLSCAFile, insecure.TLSInsecureSkipVerify = "", true
	if err := ping(t, addrs, insecure); err != nil {
		t.Errorf("--kafka-tls-insecure-skip-verify did not skip verification: %v", err)
	}

	noClientCert := good
	noClientCert.TLSCertFile, noClientCert.TLSKeyFile = "", ""
	if err := ping(t, addrs, noClientCert); err == nil {
		t.Error("connected without the client certificate the broker requires")
	}
}

// checkAuthFailure checks that err is recognised as a security failure,
// explained in one line naming the option to fix, without the secret.
func checkAuthFailure(t *testing.T, c kafkasec.Config, err error, option, secret string) {
	t.Helper()
	af := c.AuthFailure(err)
	if af == nil {
		t.Errorf("AuthFailure(%v) = nil, want a security failure", err)
		return
	}
	msg := af.Error()
	if !errors.Is(af, kafkasec.ErrAuth) || !strings.Contains(msg, option) || strings.Contains(msg, "\n") || strings.Contains(msg, secret) {
		t.Errorf("AuthFailure: %q: want one line naming %s without the secret, matching ErrAuth", msg, option)
	}
	t.Logf("%s", msg)
}

// TestAuthFailureSASL: a real broker answers a wrong password with
// SASL_AUTHENTICATION_FAILED, which franz-go returns wrapped.
func TestAuthFailureSASL(t *testing.T) {
	c := kafkasec.Config{SASLMechanism: kafkasec.MechanismScramSHA512, SASLUsername: "walbox", SASLPassword: secret}
	err := fmt.Errorf("kafka metadata: %w", kerr.SaslAuthenticationFailed)
	checkAuthFailure(t, c, err, "--kafka-sasl-password-file", secret)
	checkAuthFailure(t, c, fmt.Errorf("kafka metadata: %w", kerr.UnsupportedSaslMechanism), "--kafka-sasl-mechanism", secret)
	if c.AuthFailure(errors.New("dial tcp 127.0.0.1:1: connect: connection refused")) != nil {
		t.Error("a refused connection was taken for a security failure; walbox would stop instead of retrying")
	}
}

// TestPasswordFileRotation: the password file is read on every connection,
// so a rotated password is used without a restart.
func TestPasswordFileRotation(t *testing.T) {
	ca := certtest.NewCA(t, "kafka")
	addrs := cluster(t, ca, false)
	file := secretFile(t, "old-wrong")
	c := kafkasec.Config{TLSCAFile: ca.CertFile, SASLMechanism: kafkasec.MechanismScramSHA512, SASLUsername: "walbox", SASLPasswordFile: file}
	if err := ping(t, addrs, c); err == nil {
		t.Fatal("the wrong password connected")
	}
	if err := os.WriteFile(file, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := ping(t, addrs, c); err != nil {
		t.Fatalf("after rotating the file: %v", err)
	}
}

func TestInvalid(t *testing.T) {
	ca := certtest.NewCA(t, "kafka")
	client := ca.Client(t, "walbox")
	other := ca.Client(t, "other")
	notPEM := secretFile(t, "not a certificate")
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv(kafkasec.EnvAWSAccessKeyID, "")
	t.Setenv(kafkasec.EnvAWSSecretAccessKey, "")
	for _, tc := range []struct {
		name string
		c    kafkasec.Config
		want string
	}{
		{"missing CA", kafkasec.Config{TLSCAFile: "/nonexistent/ca.pem"}, "--kafka-tls-ca-file: cannot read CA file \"/nonexistent/ca.pem\""},
		{"CA not PEM", kafkasec.Config{TLSCAFile: notPEM}, "holds no PEM certificate"},
		{"cert without key", kafkasec.Config{TLSCertFile: client.CertFile}, "needs both --kafka-tls-cert-file and --kafka-tls-key-file"},
		{"mismatched pair", kafkasec.Config{TLSCertFile: client.CertFile, TLSKeyFile: other.KeyFile}, "cannot load the key pair"},
		{"unknown mechanism", kafkasec.Config{SASLMechanism: "GSSAPI"}, `--kafka-sasl-mechanism "GSSAPI" is not supported; use one of PLAIN, SCRAM-SHA-256`},
		{"no user", kafkasec.Config{SASLMechanism: "PLAIN", SASLPassword: secret}, "needs --kafka-sasl-username"},
		{"no password", kafkasec.Config{SASLMechanism: "SCRAM-SHA-256", SASLUsername: "u"}, "needs --kafka-sasl-password-file or --kafka-sasl-password"},
		{"empty password file", kafkasec.Config{SASLMechanism: "SCRAM-SHA-256", SASLUsername: "u", SASLPasswordFile: empty}, "--kafka-sasl-password-file: file"},
		{"no token file", kafkasec.Config{SASLMechanism: "OAUTHBEARER"}, "needs --kafka-sasl-oauth-token-file"},
		{"no AWS keys", kafkasec.Config{SASLMechanism: "AWS_MSK_IAM"}, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tc.c.Options()
			if err == nil {
				t.Fatal("no error")
			}
			if !errors.Is(err, kafkasec.ErrInvalid) {
				t.Errorf("%v does not match ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "PRIVATE KEY") {
				t.Errorf("error shows a secret: %v", err)
			}
		})
	}
}

func TestMechanisms(t *testing.T) {
	tok := secretFile(t, "token-abc")
	t.Setenv(kafkasec.EnvAWSAccessKeyID, "AKIDEXAMPLE")
	t.Setenv(kafkasec.EnvAWSSecretAccessKey, "secret-example")
	for _, c := range []kafkasec.Config{
		{SASLMechanism: "PLAIN", SASLUsername: "u", SASLPassword: "p"},
		{SASLMechanism: "SCRAM-SHA-256", SASLUsername: "u", SASLPassword: "p"},
		{SASLMechanism: "SCRAM-SHA-512", SASLUsername: "u", SASLPassword: "p"},
		{SASLMechanism: "OAUTHBEARER", SASLOAuthTokenFile: tok},
		{SASLMechanism: "AWS_MSK_IAM"},
	} {
		m, err := c.Mechanism()
		if err != nil {
			t.Fatalf("%s: %v", c.SASLMechanism, err)
		}
		if m.Name() != c.SASLMechanism {
			t.Errorf("mechanism %q, want %q", m.Name(), c.SASLMechanism)
		}
	}
	if opts, err := (kafkasec.Config{}).Options(); err != nil || len(opts) != 0 {
		t.Errorf("zero Config: %d options, %v; want none", len(opts), err)
	}
}

// TestOAuthTokenReread: the OAUTHBEARER token file is read on every
// authentication, so a token refreshed by another process is sent next.
func TestOAuthTokenReread(t *testing.T) {
	file := secretFile(t, "token-one")
	m, err := kafkasec.Config{SASLMechanism: kafkasec.MechanismOAuthBearer, SASLOAuthTokenFile: file}.Mechanism()
	if err != nil {
		t.Fatal(err)
	}
	first := func() string {
		_, msg, err := m.Authenticate(context.Background(), "broker:9092")
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	if msg := first(); !strings.Contains(msg, "Bearer token-one") {
		t.Fatalf("first message %q does not carry token-one", msg)
	}
	if err := os.WriteFile(file, []byte("token-two\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if msg := first(); !strings.Contains(msg, "Bearer token-two") || strings.Contains(msg, "token-one") {
		t.Fatalf("after the file changed, first message %q, want token-two", msg)
	}
}

// TestServerNameAndMechanismFailures: a certificate for another name and a
// mechanism the brokers do not enable are explained with the option to fix.
func TestServerNameAndMechanismFailures(t *testing.T) {
	ca := certtest.NewCA(t, "kafka")
	srv := ca.Server(t, "kafka.internal")
	c, err := kfake.NewCluster(kfake.NumBrokers(1),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{srv.TLS(t)}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.Superuser(kafkasec.MechanismScramSHA512, "walbox", secret))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	addrs := c.ListenAddrs()

	wrongName := kafkasec.Config{TLSCAFile: ca.CertFile, SASLMechanism: kafkasec.MechanismScramSHA512, SASLUsername: "walbox", SASLPassword: secret}
	if err := ping(t, addrs, wrongName); err == nil {
		t.Error("a certificate for kafka.internal was accepted for 127.0.0.1")
	} else {
		checkAuthFailure(t, wrongName, err, "--kafka-tls-server-name", secret)
	}
	named := wrongName
	named.TLSServerName = "kafka.internal"
	if err := ping(t, addrs, named); err != nil {
		t.Errorf("with --kafka-tls-server-name kafka.internal: %v", err)
	}
	plainMech := named
	plainMech.SASLMechanism = kafkasec.MechanismPlain
	if err := ping(t, addrs, plainMech); err == nil {
		t.Error("PLAIN connected to a cluster with only a SCRAM-SHA-512 user")
	} // kfake closes the connection (EOF); a real broker's answer is tested in TestAuthFailureSASL
}
