package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SASL mechanisms walbox supports, as the broker names them.
const (
	MechanismPlain       = "PLAIN"
	MechanismScramSHA256 = "SCRAM-SHA-256"
	MechanismScramSHA512 = "SCRAM-SHA-512"
	MechanismOAuthBearer = "OAUTHBEARER"
	MechanismAWSMSKIAM   = "AWS_MSK_IAM"
)

// Mechanisms lists the accepted values of Config.SASLMechanism.
var Mechanisms = []string{MechanismPlain, MechanismScramSHA256, MechanismScramSHA512, MechanismOAuthBearer, MechanismAWSMSKIAM}

// The AWS credentials AWS_MSK_IAM reads, the standard AWS variables.
const (
	EnvAWSAccessKeyID     = "AWS_ACCESS_KEY_ID"
	EnvAWSSecretAccessKey = "AWS_SECRET_ACCESS_KEY"
	EnvAWSSessionToken    = "AWS_SESSION_TOKEN"
)

// Config holds the Kafka security settings. The zero value is a plaintext
// connection without authentication.
type Config struct {
	// TLS turns TLS on; any other TLS field turns it on too.
	TLS                   bool
	TLSCAFile             string // PEM CA bundle; "" means the system roots
	TLSCertFile           string // client certificate (PEM), with TLSKeyFile
	TLSKeyFile            string // client key (PEM), with TLSCertFile
	TLSServerName         string // overrides the name checked in the broker certificate
	TLSInsecureSkipVerify bool   // accept any broker certificate: for tests only

	// SASLMechanism is "" (no SASL) or one of Mechanisms.
	SASLMechanism    string
	SASLUsername     string
	SASLPassword     string
	SASLPasswordFile string // read on every authentication; wins over SASLPassword when set
	// SASLOAuthTokenFile holds the OAUTHBEARER token; it is read on every
	// authentication, so a token refreshed by a sidecar is picked up.
	SASLOAuthTokenFile string
}

// TLSEnabled reports whether the connection uses TLS.
func (c Config) TLSEnabled() bool {
	return c.TLS || c.TLSCAFile != "" || c.TLSCertFile != "" || c.TLSKeyFile != "" ||
		c.TLSServerName != "" || c.TLSInsecureSkipVerify
}

// LoadCA reads a PEM CA bundle.
func LoadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, invalidf(err, "cannot read CA file %q: %v; give a readable PEM file", path, unwrapPath(err))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, invalidf(nil, "CA file %q holds no PEM certificate (expected -----BEGIN CERTIFICATE-----); give the CA bundle in PEM", path)
	}
	return pool, nil
}

// LoadKeyPair reads a client certificate and its key. The error never
// contains the key's content.
func LoadKeyPair(certFile, keyFile string) (tls.Certificate, error) {
	for _, f := range []string{certFile, keyFile} {
		if _, err := os.Stat(f); err != nil {
			return tls.Certificate{}, invalidf(err, "cannot read %q: %v; give a readable PEM file", f, unwrapPath(err))
		}
	}
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		// crypto/tls errors describe the PEM blocks, never their bytes.
		return tls.Certificate{}, invalidf(err, "cannot load the key pair %q / %q: %v; give the PEM certificate and its unencrypted PEM key", certFile, keyFile, err)
	}
	return pair, nil
}

// unwrapPath drops the *fs.PathError wrapper, whose text repeats the path.
func unwrapPath(err error) error {
	if u := errors.Unwrap(err); u != nil {
		return u
	}
	return err
}

// TLSConfig returns the TLS settings, nil when TLS is off.
func (c Config) TLSConfig() (*tls.Config, error) {
	if !c.TLSEnabled() {
		return nil, nil
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.TLSServerName,
		InsecureSkipVerify: c.TLSInsecureSkipVerify, //nolint:gosec // an explicit, loudly logged option
	}
	if c.TLSCAFile != "" {
		pool, err := LoadCA(c.TLSCAFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-ca-file: %w", err)
		}
		tc.RootCAs = pool
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return nil, invalidf(nil, "mutual TLS needs both --kafka-tls-cert-file and --kafka-tls-key-file; give both or neither")
	}
	if c.TLSCertFile != "" {
		pair, err := LoadKeyPair(c.TLSCertFile, c.TLSKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--kafka-tls-cert-file/--kafka-tls-key-file: %w", err)
		}
		tc.Certificates = []tls.Certificate{pair}
	}
	return tc, nil
}

// CheckSASL checks the SASL settings without reading the password or token
// files (ReadSecretFile checks those): the mechanism's name, and that what
// it needs is given.
func (c Config) CheckSASL() error {
	switch c.SASLMechanism {
	case "":
		return nil
	case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
		if c.SASLUsername == "" {
			return invalidf(nil, "--kafka-sasl-mechanism %s needs --kafka-sasl-username (WALBOX_KAFKA_SASL_USERNAME)", c.SASLMechanism)
		}
		if c.SASLPassword == "" && c.SASLPasswordFile == "" {
			return invalidf(nil, "--kafka-sasl-mechanism %s needs --kafka-sasl-password-file or --kafka-sasl-password (WALBOX_KAFKA_SASL_PASSWORD_FILE, WALBOX_KAFKA_SASL_PASSWORD)", c.SASLMechanism)
		}
		return nil
	case MechanismOAuthBearer:
		if c.SASLOAuthTokenFile == "" {
			return invalidf(nil, "--kafka-sasl-mechanism OAUTHBEARER needs --kafka-sasl-oauth-token-file (WALBOX_KAFKA_SASL_OAUTH_TOKEN_FILE)")
		}
		return nil
	case MechanismAWSMSKIAM:
		_, err := awsAuth()
		return err
	default:
		return invalidf(nil, "--kafka-sasl-mechanism %q is not supported; use one of %s",
			c.SASLMechanism, strings.Join(Mechanisms, ", "))
	}
}

// Mechanism returns the SASL mechanism, nil when SASL is off. It checks
// the settings (CheckSASL) and reads the secret files once, so that a
// problem shows at start; the credentials are then read again on every
// authentication, so rotated files are picked up.
func (c Config) Mechanism() (sasl.Mechanism, error) {
	if err := c.CheckSASL(); err != nil {
		return nil, err
	}
	switch c.SASLMechanism {
	case MechanismPlain, MechanismScramSHA256, MechanismScramSHA512:
		if _, err := c.password(); err != nil {
			return nil, err
		}
	case MechanismOAuthBearer:
		if _, err := c.token(); err != nil {
			return nil, err
		}
	}
	switch c.SASLMechanism {
	case MechanismPlain:
		return plain.Plain(func(context.Context) (plain.Auth, error) {
			pass, err := c.password()
			return plain.Auth{User: c.SASLUsername, Pass: pass}, err
		}), nil
	case MechanismScramSHA256:
		return scram.Sha256(c.scramAuth), nil
	case MechanismScramSHA512:
		return scram.Sha512(c.scramAuth), nil
	case MechanismOAuthBearer:
		return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
			tok, err := c.token()
			return oauth.Auth{Token: tok}, err
		}), nil
	case MechanismAWSMSKIAM:
		return aws.ManagedStreamingIAM(func(context.Context) (aws.Auth, error) { return awsAuth() }), nil
	}
	return nil, nil // "": no SASL
}

func (c Config) scramAuth(context.Context) (scram.Auth, error) {
	pass, err := c.password()
	return scram.Auth{User: c.SASLUsername, Pass: pass}, err
}

// password returns the password, from SASLPasswordFile when it is set.
func (c Config) password() (string, error) {
	if c.SASLPasswordFile == "" {
		return c.SASLPassword, nil
	}
	s, err := ReadSecretFile(c.SASLPasswordFile)
	if err != nil {
		return "", fmt.Errorf("--kafka-sasl-password-file: %w", err)
	}
	return s, nil
}

func (c Config) token() (string, error) {
	s, err := ReadSecretFile(c.SASLOAuthTokenFile)
	if err != nil {
		return "", fmt.Errorf("--kafka-sasl-oauth-token-file: %w", err)
	}
	return s, nil
}

// ReadSecretFile reads a file holding one secret, without a trailing
// newline. Its errors name the file, never its content.
func ReadSecretFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", invalidf(err, "cannot read %q: %v; give a file readable by walbox", path, unwrapPath(err))
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", invalidf(nil, "file %q is empty; write the secret into it", path)
	}
	return s, nil
}

func awsAuth() (aws.Auth, error) {
	a := aws.Auth{
		AccessKey:    os.Getenv(EnvAWSAccessKeyID),
		SecretKey:    os.Getenv(EnvAWSSecretAccessKey),
		SessionToken: os.Getenv(EnvAWSSessionToken),
	}
	if a.AccessKey == "" || a.SecretKey == "" {
		return aws.Auth{}, invalidf(nil, "--kafka-sasl-mechanism AWS_MSK_IAM needs the environment variables %s and %s (and %s for temporary credentials)",
			EnvAWSAccessKeyID, EnvAWSSecretAccessKey, EnvAWSSessionToken)
	}
	return a, nil
}

// Options returns the franz-go options for TLS and SASL; none when both are
// off.
func (c Config) Options() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	tc, err := c.TLSConfig()
	if err != nil {
		return nil, err
	}
	if tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	m, err := c.Mechanism()
	if err != nil {
		return nil, err
	}
	if m != nil {
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}
